"""Text-level policies for evaluation and the episode loop that drives them.

A ``TextPolicy`` reads an env's dialogue (``env.messages``, ``env.tool_schemas``) and returns
the next assistant text, tool calls written as ``<tool_call>{...}</tool_call>`` blocks:

- ``ReferencePolicy``: the env's own reference solver (proves every task solvable).
- ``OpenAIPolicy``: any OpenAI-compatible ``/chat/completions`` endpoint (``vllm serve``,
  TGI, llama.cpp's ``llama-server``, a hosted API...), greedy (``temperature=0``) with a fixed
  ``seed``; stdlib HTTP only. agentrl itself ships no server.

Hugging Face models run through the token-level batched rollout instead (``suites.py``).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any, Protocol

from agentrl.envs.reference import format_call
from agentrl.types import Message, ToolCall


class TextPolicy(Protocol):
    """Returns the next assistant text for an env in the middle of an episode."""

    name: str

    def act(self, env: Any) -> str: ...


class ReferencePolicy:
    """The env's reference solver."""

    name = "reference"

    def act(self, env: Any) -> str:
        return env.reference_action()


def to_openai_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """HF-format history -> OpenAI chat messages (call ids, JSON-string arguments).

    A tool message that answers no call (a parse-error notice) becomes a user message, since
    the OpenAI format needs every ``tool`` message to follow the call it answers.
    """
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for m in messages:
        if m["role"] == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
            calls = []
            for j, c in enumerate(m.get("tool_calls") or []):
                fn = c["function"]
                calls.append({
                    "id": f"call_{len(out)}_{j}", "type": "function",
                    "function": {"name": fn["name"], "arguments": json.dumps(fn["arguments"])},
                })  # fmt: skip
            if calls:
                msg["tool_calls"] = calls
            pending = [c["id"] for c in calls]
            out.append(msg)
        elif m["role"] == "tool":
            if pending and m.get("name"):
                out.append(
                    {"role": "tool", "tool_call_id": pending.pop(0), "content": m["content"]}
                )
            else:
                out.append({"role": "user", "content": f"[tool error] {m['content']}"})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def from_openai_message(message: dict[str, Any]) -> str:
    """An OpenAI assistant message -> our action text (calls as ``<tool_call>`` blocks)."""
    parts = [message.get("content") or ""]
    for c in message.get("tool_calls") or []:
        fn = c.get("function") or {}
        raw = fn.get("arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) else (raw or {})
        except json.JSONDecodeError:
            # keep the model's broken arguments: the env reports a parse error to it
            parts.append(f'<tool_call>\n{{"name": {json.dumps(fn.get("name"))}, '
                         f'"arguments": {raw}}}\n</tool_call>')  # fmt: skip
            continue
        parts.append(format_call(ToolCall(str(fn.get("name")), args)))
    return "\n".join(p for p in parts if p).strip()


class OpenAIPolicy:
    """Greedy chat completions from an OpenAI-compatible server (``openai:BASE_URL:MODEL``)."""

    def __init__(
        self, base_url: str, model: str, *, seed: int = 0, timeout_s: float = 120.0,
        max_tokens: int = 512, api_key: str | None = None,
    ) -> None:  # fmt: skip
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.seed, self.timeout_s, self.max_tokens = seed, timeout_s, max_tokens
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY", "")
        self.name = f"openai:{self.base_url}:{model}"

    @classmethod
    def from_spec(cls, spec: str, **kwargs: Any) -> OpenAIPolicy:
        """Parse ``openai:BASE_URL:MODEL`` (the URL may contain colons; the model may not)."""
        body = spec.removeprefix("openai:")
        base_url, sep, model = body.rpartition(":")
        if not sep or not base_url.startswith(("http://", "https://")) or not model:
            raise ValueError(
                f"bad policy {spec!r}: expected openai:BASE_URL:MODEL, "
                "e.g. openai:http://localhost:8000/v1:Qwen2.5-0.5B-Instruct"
            )
        return cls(base_url, model, **kwargs)

    def request(self, messages: list[Message], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """One ``/chat/completions`` call; returns the assistant message."""
        payload = {
            "model": self.model,
            "messages": to_openai_messages(messages),
            "temperature": 0.0,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
        }
        if tools:
            payload["tools"] = tools
        req = urllib.request.Request(
            f"{self.base_url}/chat/completions",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json",
                     **({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body = json.loads(resp.read().decode())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise RuntimeError(f"{self.base_url}: HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, TimeoutError) as exc:
            raise RuntimeError(f"{self.base_url}: cannot reach the server: {exc}") from exc
        try:
            return body["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as exc:
            raise RuntimeError(f"{self.base_url}: unexpected response {str(body)[:200]}") from exc

    def act(self, env: Any) -> str:
        return from_openai_message(self.request(env.messages, env.tool_schemas))


def run_text_episode(policy: TextPolicy, env: Any, seed: int, level: int) -> dict[str, Any]:
    """Play one episode; a policy exception ends it as ``harness_error`` (never a failure)."""
    _, reset_info = env.reset(seed=seed, options={"level": level})
    info: dict[str, Any] = {}
    error = None
    calls: list[dict[str, Any]] = []
    for _ in range(env.max_turns):
        try:
            action = policy.act(env)
        except Exception as exc:  # noqa: BLE001 - an endpoint fault is a harness fault
            error = f"{type(exc).__name__}: {exc}"
            env.finish("harness_error")
            break
        _, _, terminated, truncated, info = env.step(action)
        calls += info.get("tool_calls", [])
        if terminated or truncated:
            break
    reward = env.breakdown if env.breakdown is not None else env.finish("max_turns")
    return {
        "task_id": reset_info["task_id"],
        "seed": seed,
        "level": level,
        "termination": env.termination,
        "success": env.termination == "success",
        "reward": reward.to_dict(),
        "tool_calls": calls,
        "messages": [dict(m) for m in env.messages],
        **({"error": error} if error else {}),
    }
