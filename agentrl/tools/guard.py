"""ToolGuard: the only path from a model's tool call to a tool (DESIGN contract 2).

Every call returns a ``ToolResult``: unknown tools, arguments that fail the JSON schema and
exceptions inside the tool come back as error results the model can read, counted by class.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import asdict, is_dataclass
from typing import Any

import jsonschema

from agentrl.tools.registry import ToolRegistry
from agentrl.types import ToolCall, ToolResult

FAILURE_CLASSES = (
    "invalid_arguments",
    "unknown_tool",
    "parse_error",
    "timeout",
    "exception",
    "circuit_open",
    "truncated_output",
)
MAX_RESULT_CHARS = 4_000
_TRUNCATED = "...[truncated {n} chars]"


def to_jsonable(value: Any, depth: int = 0) -> Any:
    """Turn any return value into JSON-safe data (bytes, sets, NaN, dataclasses, exceptions...)."""
    if depth > 20:
        return repr(value)[:200]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): to_jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [to_jsonable(v, depth + 1) for v in items]
    if is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(asdict(value), depth + 1)
    if isinstance(value, BaseException):
        return {"error": type(value).__name__, "message": str(value)}
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return to_jsonable(value.item(), depth + 1)
        except (TypeError, ValueError):
            pass
    if hasattr(value, "tolist") and callable(value.tolist):
        return to_jsonable(value.tolist(), depth + 1)
    return str(value)


def sanitize(value: Any, max_chars: int = MAX_RESULT_CHARS) -> tuple[str, bool]:
    """JSON text for a tool's return value, capped; returns (text, was_truncated)."""
    text = value if isinstance(value, str) else json.dumps(to_jsonable(value), ensure_ascii=False)
    if len(text) <= max_chars:
        return text, False
    cut = len(text) - max_chars
    return text[:max_chars] + _TRUNCATED.format(n=cut), True


def describe_validation_error(tool_name: str, err: jsonschema.ValidationError) -> str:
    """A readable message naming the argument, what was expected and what came."""
    where = ".".join(str(p) for p in err.absolute_path) or "(arguments)"
    if err.validator == "required":
        return f"{tool_name}: {err.message}."
    if err.validator == "additionalProperties":
        return f"{tool_name}: {err.message}."
    expected = err.validator_value
    if err.validator == "enum":
        return f"{tool_name}: argument {where!r} must be one of {expected}, got {err.instance!r}."
    if err.validator == "type":
        return f"{tool_name}: argument {where!r} must be of type {expected}, got {err.instance!r}."
    return f"{tool_name}: argument {where!r} is invalid: {err.message}."


class ToolGuard:
    """Validate, dispatch and sanitize tool calls; count failures per tool and class."""

    def __init__(self, registry: ToolRegistry, *, max_result_chars: int = MAX_RESULT_CHARS):
        self.registry = registry
        self.max_result_chars = max_result_chars
        self.failures: Counter[tuple[str, str]] = Counter()
        self.calls: Counter[str] = Counter()

    def error(self, name: str, code: str, message: str, latency: float = 0.0) -> ToolResult:
        """Record one failure and build the result the model reads."""
        self.failures[(name, code)] += 1
        content = json.dumps({"error": code, "message": message}, ensure_ascii=False)
        return ToolResult(name, content, ok=False, error_code=code, latency_s=latency)

    def call(self, call: ToolCall) -> ToolResult:
        """Run one call; never raises for anything the model can cause."""
        self.calls[call.name] += 1
        t = self.registry.get(call.name)
        if t is None:
            known = ", ".join(self.registry.names) or "none"
            return self.error(
                call.name, "unknown_tool", f"No tool named {call.name!r}. Available tools: {known}."
            )
        validator = jsonschema.Draft202012Validator(t.parameters)
        err = jsonschema.exceptions.best_match(validator.iter_errors(call.arguments))
        if err is not None:
            return self.error(
                call.name, "invalid_arguments", describe_validation_error(t.name, err)
            )
        start = time.perf_counter()
        try:
            value = t.fn(**call.arguments)
        except Exception as exc:  # noqa: BLE001 - the model must see any tool failure
            latency = time.perf_counter() - start
            return self.error(call.name, "exception", f"{type(exc).__name__}: {exc}", latency)
        latency = time.perf_counter() - start
        text, truncated = sanitize(value, self.max_result_chars)
        if truncated:
            self.failures[(call.name, "truncated_output")] += 1
        return ToolResult(call.name, text, ok=True, latency_s=latency)

    def record_parse_error(self) -> None:
        """Malformed calls never reach a tool but are counted with the rest."""
        self.failures[("<parse>", "parse_error")] += 1

    def rates(self) -> dict[str, float]:
        """``tool/<name>/<class>_rate`` over calls made to each tool so far."""
        out: dict[str, float] = {}
        for (name, code), n in self.failures.items():
            total = max(self.calls.get(name, 0), 1)
            out[f"tool/{name}/{code}_rate"] = n / total
        return out
