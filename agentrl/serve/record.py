"""The recording gateway of ``agentrl serve --record DIR``: token-exact records of every
completion, grouped into episodes by session, and the rewards programs report.

A *session* (the ``X-Agentrl-Session`` header, else the OpenAI ``user`` field) is one episode
of an agent program. Within a session the server keeps what it decoded: when a request's
messages are the previous request's messages, then the assistant reply the server gave (as the
client sends it back: content, tool calls and their JSON arguments), then new messages (tool
results, a user turn), the prompt is the previous prompt ids + the sampled ids + the new
messages rendered as a chat-template *delta* (``encode_delta``), exactly as agentrl's own
rollout builds a multi-turn episode. The program's history is never re-tokenized: the model
sees, and training uses, the ids it produced (DESIGN contract 1). A request that does not
continue that way (the program rewrote or trimmed its history, changed tools, or the last
reply was cut by ``max_tokens`` or a stop string) is rendered whole and starts a new
segment of the episode (``agentrl.serve.episodes``).

Files in DIR (JSON lines, appended): ``records.jsonl``, one line per completion (choice) with
``token_ids`` (prompt then sampled ids), ``loss_mask`` (0 prompt, 1 sampled), ``logprobs``
(rollout-time, 0.0 on the prompt) and ``prompt_len``; ``rewards.jsonl``, one line per
reported reward. ``load_sessions(DIR)`` reads them back.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.chat.render import encode_delta, encode_prompt, im_end_id
from agentrl.serve.client import SESSION_HEADER
from agentrl.types import Message

__all__ = ["SESSION_HEADER", "Recorder", "RewardError", "load_sessions", "parse_reward"]
MAX_LIVE_SESSIONS = 4096  # sessions whose last turn is kept for continuation (oldest dropped)


class RewardError(ValueError):
    """A reward report the server refuses: the ``param`` it names and the HTTP ``status``."""

    def __init__(self, message: str, param: str | None, status: int = 400) -> None:
        super().__init__(message)
        self.param, self.status = param, status


@dataclass
class _Turn:
    """One completion of a session's latest request, kept so the next request can extend it."""

    messages: list[Message]  # the request's messages (agentrl chat format)
    tools: Any
    reply: Message  # the reply as the client will send it back (chat format)
    ids: list[int]  # prompt + sampled ids
    open_end: bool  # the sampled ids end with <|im_end|>: a delta can follow


def parse_reward(body: Any) -> tuple[str, float, bool | None]:
    """``(session, reward, success)`` of a ``POST /v1/agentrl/reward`` body, or a
    ``RewardError`` naming the bad field."""
    if not isinstance(body, dict):
        raise RewardError("the body must be a JSON object {session, reward, success?}", None)
    session = body.get("session")
    if not isinstance(session, str) or not session:
        raise RewardError("session must be a non-empty string (the episode's session id)",
                          "session")  # fmt: skip
    reward = body.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        raise RewardError(f"reward must be a number, got {reward!r}", "reward")
    if not math.isfinite(reward):
        raise RewardError(f"reward must be finite, got {reward!r}", "reward")
    success = body.get("success")
    if success is not None and not isinstance(success, bool):
        raise RewardError(f"success must be true, false or absent, got {success!r}", "success")
    unknown = sorted(set(body) - {"session", "reward", "success"})
    if unknown:
        raise RewardError(f"unknown field {unknown[0]!r} (allowed: session, reward, success)",
                          unknown[0])  # fmt: skip
    return session, float(reward), success


class Recorder:
    """Builds session prompts token-exactly and records completions and rewards.

    ``directory``: where the JSONL files go (None: memory only). ``keep``: also keep each
    session's records in memory until ``take`` (the trainer reads them this way).
    ``sampling``: (greedy, temperature, top_p) forced on every request (the trainer sets its
    rollout temperature, so the recorded log-probs are the ones it trains with); None = the
    request's own; each record repeats it. ``max_new``: a cap on every reply's tokens (the
    trainer's ``rollout.max_new_tokens``). ``version``: written into each record (the
    trainer's step).
    """

    def __init__(self, tokenizer: Any, directory: str | Path | None = None, *,
                 keep: bool = False) -> None:  # fmt: skip
        self.tok, self.keep = tokenizer, keep
        self.end_id = im_end_id(tokenizer)
        self.dir = Path(directory) if directory is not None else None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.last: OrderedDict[str, list[_Turn]] = OrderedDict()
        self.turns: dict[str, int] = {}
        self.kept: dict[str, list[dict[str, Any]]] = {}
        self.rewards: dict[str, dict[str, Any]] = {}
        self.sampling: tuple[bool, float, float] | None = None
        self.max_new: int | None = None
        self.version = 0

    # -- prompts -------------------------------------------------------------------------
    def prompt(self, session: str | None, messages: list[Message],
               tools: Any) -> tuple[list[int], bool]:  # fmt: skip
        """The prompt ids of a request and whether they continue the session's last turn."""
        with self.lock:
            candidates = list(self.last.get(session, ())) if session else []
        for turn in candidates:
            k = len(turn.messages)
            if (turn.open_end and turn.tools == tools and len(messages) > k + 1
                    and messages[:k] == turn.messages and messages[k] == turn.reply):  # fmt: skip
                return turn.ids + encode_delta(self.tok, messages[: k + 1], messages[k + 1 :],
                                               tools), True  # fmt: skip
        return encode_prompt(self.tok, messages, tools), False

    # -- records -------------------------------------------------------------------------
    def record(self, session: str | None, request_id: str, messages: list[Message], tools: Any,
               prompt: list[int], continued: bool,
               outs: list[tuple[Any, str, Message, str]]) -> list[dict[str, Any]]:  # fmt: skip
        """Record a request's completions: ``outs`` = (sample, text, reply message, finish
        reason) per choice. Returns the records (also appended to ``records.jsonl``)."""
        session = session or request_id
        n = len(prompt)
        with self.lock:
            turn = self.turns.get(session, 0)
            self.turns[session] = turn + 1
        records, kept = [], []
        for i, (sample, text, reply, finish) in enumerate(outs):
            ids = list(sample.ids)
            records.append({
                "session": session, "request": request_id, "choice": i, "turn": turn,
                "continued": continued, "time": time.time(), "version": self.version,
                "sampling": list(self.sampling) if self.sampling else None,
                "prompt_len": n, "token_ids": prompt + ids,
                "loss_mask": [0] * n + [1] * len(ids),
                "logprobs": [0.0] * n + [float(x) for x in sample.logprobs],
                "finish_reason": finish, "text": text, "messages": messages, "reply": reply,
            })  # fmt: skip
            open_end = bool(ids) and ids[-1] == self.end_id and finish in ("stop", "tool_calls")
            kept.append(_Turn(messages, tools, reply, prompt + ids, open_end))
        with self.lock:
            self.last[session] = kept
            self.last.move_to_end(session)
            while len(self.last) > MAX_LIVE_SESSIONS:
                old, _ = self.last.popitem(last=False)
                self.turns.pop(old, None)
            if self.keep:
                self.kept.setdefault(session, []).extend(records)
            self._append("records.jsonl", records)
        return records

    def reward(self, session: str, reward: float, success: bool | None) -> dict[str, Any]:
        """Store a session's reward (once); a session with no recorded request is a 404."""
        with self.lock:
            if session not in self.turns:
                raise RewardError(f"session {session!r} has no recorded requests (send its "
                                  f"requests with the {SESSION_HEADER} header or the 'user' "
                                  "field first)", "session", 404)  # fmt: skip
            if session in self.rewards:
                raise RewardError(f"session {session!r} already has a reward", "session", 409)
            entry = {"session": session, "reward": reward, "success": success,
                     "time": time.time()}  # fmt: skip
            self.rewards[session] = entry
            self._append("rewards.jsonl", [entry])
        return entry

    def take(self, session: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """A session's kept records and reward, forgotten here (the trainer's read)."""
        with self.lock:
            self.last.pop(session, None)
            self.turns.pop(session, None)
            return self.kept.pop(session, []), self.rewards.pop(session, None)

    def drop_kept(self) -> int:
        """Forget every kept session (requests no episode claimed); how many records."""
        with self.lock:
            n = sum(len(v) for v in self.kept.values())
            self.kept.clear()
            self.rewards.clear()
            return n

    def _append(self, name: str, rows: list[dict[str, Any]]) -> None:
        if self.dir is None:
            return
        with open(self.dir / name, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


def load_sessions(directory: str | Path) -> dict[str, tuple[list[dict], dict | None]]:
    """``{session: (records in order, reward or None)}`` from a recording directory."""
    d = Path(directory)
    out: dict[str, tuple[list[dict], dict | None]] = {}
    path = d / "records.jsonl"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                out.setdefault(rec["session"], ([], None))[0].append(rec)
    rewards = d / "rewards.jsonl"
    if rewards.is_file():
        for line in rewards.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                records = out.get(entry["session"], ([], None))[0]
                out[entry["session"]] = (records, entry)
    return out
