"""Read tool calls out of model text. Total: never raises, bounded time (DESIGN contract 2).

A well-formed call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. Whatever
cannot be read becomes a ``ParseError`` whose message tells the model what a call must look
like; the environment sends it back as an observation so the model can correct itself.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentrl.types import ParsedAction, ParseError, ToolCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"
MAX_CALL_CHARS = 65_536  # a call body larger than this is refused unread
MAX_CALLS = 16
_FORMAT_HINT = 'Write calls as <tool_call>{"name": "tool_name", "arguments": {...}}</tool_call>.'
_FENCE_RE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_TRAILING_COMMA_RE = re.compile(r",\s*([}\]])")


def _error(code: str, detail: str) -> ParseError:
    return ParseError(code, f"{detail} {_FORMAT_HINT}")


def _loads_lenient(body: str) -> Any:
    """json.loads, then one repair pass: trailing commas, single quotes, Python literals."""
    try:
        return json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        pass
    repaired = _TRAILING_COMMA_RE.sub(r"\1", body)
    if "'" in repaired and '"' not in repaired:
        repaired = repaired.replace("'", '"')
    repaired = re.sub(
        r"\bNone\b", "null", re.sub(r"\bTrue\b", "true", re.sub(r"\bFalse\b", "false", repaired))
    )
    return json.loads(repaired)  # may raise; the caller reports invalid_json


def _call_from_obj(obj: Any) -> ToolCall | ParseError:
    """Check a decoded call object's shape."""
    if not isinstance(obj, dict):
        return _error(
            "invalid_json", f"A tool call must be a JSON object, got {type(obj).__name__}."
        )
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return _error("missing_name", 'The tool call has no "name" string.')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            return _error("bad_arguments", f'"arguments" of {name!r} is a string that is not JSON.')
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return _error(
            "bad_arguments",
            f'"arguments" of {name!r} must be an object, got {type(args).__name__}.',
        )
    return ToolCall(name.strip(), args)


def _decode_body(text: str, start: int) -> tuple[ToolCall | ParseError, int]:
    """Decode one call starting at ``start`` (just after <tool_call>); return it and the end."""
    close = text.find(CLOSE, start)
    brace = text.find("{", start)
    # Preferred: a raw JSON object (strings may contain "</tool_call>"), then the close tag.
    if brace != -1 and (close == -1 or brace < close) and not text[start:brace].strip("` \n\tjson"):
        try:
            obj, end = json.JSONDecoder().raw_decode(text, brace)
        except (json.JSONDecodeError, RecursionError):
            obj, end = None, -1
        if end != -1:
            tail = text[end:]
            stripped = tail.lstrip("` \n\t")
            if stripped.startswith(CLOSE):
                return _call_from_obj(obj), len(text) - len(stripped) + len(CLOSE)
    if close == -1:
        return _error(
            "unclosed_tag", "<tool_call> was opened but never closed with </tool_call>."
        ), len(text)
    body = _FENCE_RE.sub("", text[start:close].strip()).strip()
    if not body:
        return _error("empty_call", "The <tool_call> block is empty."), close + len(CLOSE)
    try:
        obj = _loads_lenient(body)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        return _error(
            "invalid_json", f"The tool call is not valid JSON ({exc}).".replace("\n", " ")
        ), close + len(CLOSE)
    return _call_from_obj(obj), close + len(CLOSE)


def parse_action(text: str) -> ParsedAction:
    """Split assistant text into free text, tool calls and parse errors."""
    if not isinstance(text, str):
        text = str(text)
    calls: list[ToolCall] = []
    errors: list[ParseError] = []
    outside: list[str] = []
    pos = 0
    while pos < len(text) and len(calls) + len(errors) < MAX_CALLS:
        open_at = text.find(OPEN, pos)
        close_at = text.find(CLOSE, pos)
        if close_at != -1 and (open_at == -1 or close_at < open_at):
            outside.append(text[pos:close_at])
            errors.append(_error("stray_close_tag", "</tool_call> appeared without <tool_call>."))
            pos = close_at + len(CLOSE)
            continue
        if open_at == -1:
            outside.append(text[pos:])
            pos = len(text)
            break
        outside.append(text[pos:open_at])
        body_start = open_at + len(OPEN)
        next_close = text.find(CLOSE, body_start)
        body_len = (next_close if next_close != -1 else len(text)) - body_start
        if body_len > MAX_CALL_CHARS:
            errors.append(
                _error(
                    "too_large",
                    f"The tool call is {body_len} characters; the limit is {MAX_CALL_CHARS}.",
                )
            )
            pos = next_close + len(CLOSE) if next_close != -1 else len(text)
            continue
        item, pos = _decode_body(text, body_start)
        (calls if isinstance(item, ToolCall) else errors).append(item)
    skipped = text.count(OPEN, pos)
    if skipped:  # past the cap: said, not dropped silently
        errors.append(_error("too_many_calls", f"A turn runs at most {MAX_CALLS} tool calls; "
                             f"{skipped} more were not run."))  # fmt: skip
        outside.append(text[pos:].split(OPEN, 1)[0])
    free_text = "".join(outside).strip()
    free_text = re.sub(r"```[a-zA-Z]*\s*```", "", free_text).strip()
    return ParsedAction(free_text, tuple(calls), tuple(errors))
