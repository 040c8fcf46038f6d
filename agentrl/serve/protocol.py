"""The OpenAI chat-completions wire format: requests in, our chat messages, replies out.

``ChatRequest`` validates a request body (pydantic: a wrong field is named in the 400 reply);
``to_chat_messages`` turns OpenAI messages (JSON-string arguments, ``tool_call_id``) into the
chat-template format agentrl renders; ``choice_message`` parses a generated turn with
agentrl's tool-call parser into an OpenAI assistant message.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrl.chat.parser import parse_action
from agentrl.types import Message


class RequestError(ValueError):
    """A request the server cannot serve: ``status`` and the ``param`` it names."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error") -> None:  # fmt: skip
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions`` (the fields agentrl serves; others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    seed: int | None = None
    user: str | None = None


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:  # fmt: skip
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        parts = [p for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(str(p.get("text", "")) for p in parts)
    raise RequestError(f"{where}.content must be a string or a list of parts", where)


def _tool_calls(raw: list[Any], where: str) -> list[dict[str, Any]]:
    calls = []
    for j, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            param = f"{where}.tool_calls[{j}].function.name"
            raise RequestError(f"{param} is missing", param)
        args = fn.get("arguments", "{}")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except json.JSONDecodeError as err:
            param = f"{where}.tool_calls[{j}].function.arguments"
            raise RequestError(f"{param} is not valid JSON: {err}", param) from err
        calls.append({"type": "function", "function": {"name": fn["name"], "arguments": args}})
    return calls


def to_chat_messages(messages: list[dict[str, Any]]) -> list[Message]:
    """OpenAI messages -> agentrl chat messages (tool results named after their call)."""
    out: list[Message] = []
    call_names: dict[str, str] = {}
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("system", "developer", "user"):
            out.append({"role": "system" if role == "developer" else role,
                        "content": _text(m.get("content"), where)})  # fmt: skip
        elif role == "assistant":
            msg: Message = {"role": "assistant", "content": _text(m.get("content"), where)}
            if m.get("tool_calls"):
                msg["tool_calls"] = _tool_calls(m["tool_calls"], where)
                for call, c in zip(m["tool_calls"], msg["tool_calls"], strict=True):
                    call_names[str(call.get("id"))] = c["function"]["name"]
            out.append(msg)
        elif role == "tool":
            name = call_names.get(str(m.get("tool_call_id")), m.get("name") or "tool")
            out.append({"role": "tool", "name": name, "content": _text(m.get("content"), where)})
        else:
            raise RequestError(
                f"{where}.role must be system, developer, user, assistant or tool, got {role!r}",
                f"{where}.role",
            )
    return out


def choice_message(text: str) -> tuple[dict[str, Any], bool]:
    """A generated turn as an OpenAI assistant message; (message, has tool calls)."""
    parsed = parse_action(text)
    if not parsed.tool_calls:
        return {"role": "assistant", "content": text.strip()}, False
    calls = [
        {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
         "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for c in parsed.tool_calls
    ]  # fmt: skip
    return {"role": "assistant", "content": parsed.text or None, "tool_calls": calls}, True


def sampling_of(req: ChatRequest) -> tuple[bool, float, float]:
    """(greedy, temperature, top_p): temperature 0 is greedy."""
    return (req.temperature == 0, max(req.temperature, 1e-5), req.top_p)


FinishReason = Literal["stop", "length", "tool_calls"]
