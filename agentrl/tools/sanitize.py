"""Result sanitizer: any tool return value -> JSON-safe, size-capped text.

Used by the guard in-process and inside worker processes (so a pathological object is turned
into text where it can do no harm). Pure functions; they never raise for any value.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields, is_dataclass
from typing import Any

MAX_RESULT_CHARS = 4_000
MAX_LEAF_CHARS = 1_000_000  # strings / bytes longer than this are cut before JSON encoding
MAX_ITEMS = 10_000  # containers longer than this are cut (a marker item says how much)
_TRUNCATED = "...[truncated {n} chars]"


def _cut(text: str) -> str:
    if len(text) <= MAX_LEAF_CHARS:
        return text
    return text[:MAX_LEAF_CHARS] + _TRUNCATED.format(n=len(text) - MAX_LEAF_CHARS)


def safe_str(value: Any) -> str:
    """``str(value)``, cut to ``MAX_LEAF_CHARS``; never raises."""
    try:
        return _cut(str(value))
    except Exception:  # noqa: BLE001 - a __str__ that raises must not escape
        return f"<unprintable {type(value).__name__}>"


def _items(values: Any, depth: int) -> list[Any]:
    out = []
    for i, v in enumerate(values):
        if i >= MAX_ITEMS:
            out.append(f"...[{len(values) - MAX_ITEMS} more items]")
            break
        out.append(to_jsonable(v, depth + 1))
    return out


def to_jsonable(value: Any, depth: int = 0) -> Any:
    """Turn any return value into JSON-safe data (bytes, sets, NaN, dataclasses, exceptions...)."""
    if depth > 20:
        return safe_str(value)[:200]
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        return _cut(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return _cut(bytes(value[: MAX_LEAF_CHARS * 4]).decode("utf-8", errors="replace"))
    if isinstance(value, dict):
        return {safe_str(k): to_jsonable(v, depth + 1) for k, v in list(value.items())[:MAX_ITEMS]}
    if isinstance(value, list | tuple):
        return _items(value, depth)
    if isinstance(value, set | frozenset):
        return _items(sorted(value, key=repr), depth)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name, None), depth + 1) for f in fields(value)}
    if isinstance(value, BaseException):
        return {"error": type(value).__name__, "message": safe_str(value)}
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return to_jsonable(value.item(), depth + 1)
        except Exception:  # noqa: BLE001 - arrays of size > 1 raise ValueError; others anything
            pass
    if hasattr(value, "tolist") and callable(value.tolist):
        try:
            return to_jsonable(value.tolist(), depth + 1)
        except Exception:  # noqa: BLE001
            pass
    return safe_str(value)


def sanitize(value: Any, max_chars: int = MAX_RESULT_CHARS) -> tuple[str, bool]:
    """JSON text for a tool's return value, capped; returns (text, was_truncated)."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(to_jsonable(value), ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            text = json.dumps(safe_str(value), ensure_ascii=False)
    if len(text) <= max_chars:
        return text, False
    cut = len(text) - max_chars
    return text[:max_chars] + _TRUNCATED.format(n=cut), True
