"""Warm records: one turn compressed to (task type, tool-call result, state) with its key
values, rendered as one short line::

    t4 get_weather(city=Oslo) ok: temperature_c=-3 condition=snowy

*Task type* is what the turn did: the tools it called, ``answer`` (no call: the final
answer) or ``parse_error``. The *result* keeps the key values of each tool's JSON reply:
its scalar leaves (``a.b=value``), strings cut to ``MAX_VALUE_CHARS``, at most
``MAX_KEYS`` per call, leaves that only repeat an argument (``city=Oslo``) dropped; a reply
that is not JSON keeps its first characters. *State* is the
call's outcome: ``ok`` or ``error <code>``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentrl.memory.turns import Turn

MAX_KEYS = 6
MAX_VALUE_CHARS = 24
MAX_TEXT_CHARS = 60


@dataclass(frozen=True)
class CallRecord:
    """One tool call of a turn: its name, argument values and result key values."""

    name: str
    arguments: tuple[tuple[str, str], ...]
    result: tuple[tuple[str, str], ...]
    state: str  # "ok" or "error <code>"


@dataclass(frozen=True)
class WarmRecord:
    """One turn, compressed: ``kind`` (task type), its calls, and a snippet of its text."""

    turn: int
    kind: str
    calls: tuple[CallRecord, ...]
    text: str = ""

    def line(self) -> str:
        """The record as one line of the memory note."""
        if not self.calls:
            return f"t{self.turn} {self.kind}: {self.text}".rstrip(": ")
        parts = []
        for c in self.calls:
            args = ", ".join(f"{k}={v}" for k, v in c.arguments)
            values = " ".join(f"{k}={v}" for k, v in c.result)
            parts.append(f"{c.name}({args}) {c.state}" + (f": {values}" if values else ""))
        return f"t{self.turn} " + "; ".join(parts)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def key_values(value: Any, prefix: str = "", limit: int = MAX_KEYS) -> list[tuple[str, str]]:
    """Scalar leaves of a JSON value as ``(dotted key, short text)``, depth first, at most
    ``limit``; list items are keyed by index."""
    out: list[tuple[str, str]] = []

    def walk(v: Any, key: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(v, dict):
            for k, sub in v.items():
                walk(sub, f"{key}.{k}" if key else str(k))
        elif isinstance(v, list):
            for i, sub in enumerate(v):
                walk(sub, f"{key}.{i}" if key else str(i))
        else:
            out.append((key or "value", _short(v)))

    walk(value, prefix)
    return out


def _as_json(value: Any) -> Any:
    """Arguments as a dict when they are a JSON object's text (the OpenAI wire format)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return value


def _result_values(content: str) -> tuple[list[tuple[str, str]], str | None]:
    """(key values, error code or None) of one tool reply's text."""
    try:
        value = json.loads(content)
    except (json.JSONDecodeError, RecursionError, TypeError):
        return [("text", _short(content))], None
    error = str(value["error"]) if isinstance(value, dict) and "error" in value else None
    if error is not None:
        value = {k: v for k, v in value.items() if k not in ("error", "message")}
    return key_values(value), error


def compress_turn(index: int, turn: Turn) -> WarmRecord:
    """The warm record of assistant turn ``index`` (``turn``: its assistant message first,
    then the replies). Calls pair with replies in order, as the env appends them."""
    assistant, replies = turn[0], turn[1:]
    calls = [c.get("function", c) for c in assistant.get("tool_calls") or []]
    records = []
    for j, call in enumerate(calls):
        reply = replies[j] if j < len(replies) else {"content": ""}
        values, error = _result_values(str(reply.get("content") or ""))
        args = _as_json(call.get("arguments"))
        arg_values = key_values(args) if isinstance(args, dict) else [("args", _short(args))]
        values = [kv for kv in values if kv not in arg_values]
        state = "ok" if error is None else f"error {error}"
        records.append(CallRecord(str(call.get("name", "?")), tuple(arg_values), tuple(values),
                                  state))  # fmt: skip
    text = " ".join(str(assistant.get("content") or "").split())[:MAX_TEXT_CHARS]
    if records:
        return WarmRecord(index, "+".join(r.name for r in records), tuple(records), text)
    if len(replies) > len(calls):  # replies without calls: the turn could not be parsed
        values, error = _result_values(str(replies[0].get("content") or ""))
        return WarmRecord(index, "parse_error", (), dict(values).get("code", error or ""))
    return WarmRecord(index, "answer", (), text)
