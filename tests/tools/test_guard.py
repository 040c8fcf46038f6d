"""ToolGuard: every failure is a readable ToolResult, never an exception; outputs sanitized."""

from __future__ import annotations

import json
from dataclasses import dataclass

from agentrl.tools.guard import ToolGuard, sanitize, to_jsonable
from agentrl.tools.registry import ToolRegistry, tool
from agentrl.types import ToolCall


@tool
def add(a: int, b: int = 1) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


@tool
def boom(x: str) -> str:
    """Always fails."""
    raise RuntimeError(f"disk on fire near {x}")


@tool
def huge() -> str:
    """A very long answer."""
    return "y" * 10_000


def make_guard() -> ToolGuard:
    return ToolGuard(ToolRegistry([add, boom, huge]), max_result_chars=100)


def test_success():
    result = make_guard().call(ToolCall("add", {"a": 2, "b": 3}))
    assert (result.ok, result.content, result.error_code) == (True, "5", None)


def test_unknown_tool_lists_available():
    guard = make_guard()
    r = guard.call(ToolCall("sub", {}))
    assert not r.ok and r.error_code == "unknown_tool"
    assert json.loads(r.content) == {
        "error": "unknown_tool",
        "message": "No tool named 'sub'. Available tools: add, boom, huge.",
    }
    assert guard.failures[("sub", "unknown_tool")] == 1


def test_invalid_arguments_name_argument_type_and_value():
    guard = make_guard()
    r = guard.call(ToolCall("add", {"a": "two"}))
    assert r.error_code == "invalid_arguments"
    assert json.loads(r.content)["message"] == (
        "add: argument 'a' must be of type integer, got 'two'."
    )
    missing = guard.call(ToolCall("add", {"b": 1}))
    assert json.loads(missing.content)["message"] == "add: 'a' is a required property."
    assert guard.rates()["tool/add/invalid_arguments_rate"] == 1.0


def test_exception_becomes_result():
    r = make_guard().call(ToolCall("boom", {"x": "rack 3"}))
    assert not r.ok and r.error_code == "exception"
    assert json.loads(r.content)["message"] == "RuntimeError: disk on fire near rack 3"


def test_huge_output_truncated_with_marker():
    guard = make_guard()
    r = guard.call(ToolCall("huge", {}))
    assert r.ok
    assert r.content == "y" * 100 + "...[truncated 9900 chars]"
    assert guard.failures[("huge", "truncated_output")] == 1


@dataclass
class Point:
    x: int
    y: float


def test_sanitizer_cases():
    assert to_jsonable(b"caf\xc3\xa9") == "café"
    assert to_jsonable({3, 1, 2}) == [1, 2, 3]
    assert to_jsonable(float("nan")) == "nan"
    assert to_jsonable(float("inf")) == "inf"
    assert to_jsonable(Point(1, 2.5)) == {"x": 1, "y": 2.5}
    assert to_jsonable(ValueError("bad")) == {"error": "ValueError", "message": "bad"}
    assert to_jsonable({1: (b"a", None)}) == {"1": ["a", None]}
    assert sanitize({"v": float("nan")}) == ('{"v": "nan"}', False)
    assert sanitize("z" * 12, max_chars=10) == ("z" * 10 + "...[truncated 2 chars]", True)


def test_results_say_when_the_output_was_cut_and_which_arguments_were_coerced():
    """The flags reach the ToolResult, so trajectories and metrics.jsonl can count them."""
    g = make_guard()
    cut = g.call(ToolCall("huge", {}))
    assert cut.ok and cut.truncated_output
    assert cut.content == "y" * 100 + "...[truncated 9900 chars]"
    plain = g.call(ToolCall("add", {"a": 2, "b": 3}))
    assert plain.ok and not plain.truncated_output and plain.coerced == ()
