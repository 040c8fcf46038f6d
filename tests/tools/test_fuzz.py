"""Hypothesis fuzzing of the tool-call parser and the argument validator: never raises,
bounded time, and a readable error for the model."""

from __future__ import annotations

import json
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.chat.parser import parse_action
from agentrl.tools.guard import FAILURE_CLASSES, ToolGuard
from agentrl.tools.health import HealthBoard
from agentrl.tools.registry import ToolRegistry, tool
from agentrl.tools.settings import ToolsConfig
from agentrl.tools.validate import validate_arguments
from agentrl.types import PARSE_ERROR_CODES, ToolCall

FRAGMENTS = st.sampled_from(
    [
        "<tool_call>", "</tool_call>", "{", "}", "[", "]", '"', "'", ",", ":", "```", "```json\n",
        '"name"', '"arguments"', '"get"', '"pick"', "null", "true", "1e999", "\\", "\n", " ",
        '{"name": "get", "arguments": {"n": 3}}', '"arguments": "{\\"n\\": 1}"', "None",
        '{"name": "pick", "arguments": {"unit": "k"}}', "</tool_call> in a string", "é",
    ]
)  # fmt: skip
TEXTS = st.lists(st.one_of(FRAGMENTS, st.text(max_size=20)), max_size=40).map("".join)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)


@tool
def get(n: int, tags: list[str] | None = None) -> int:
    """Get.

    Args:
        n: A number.
        tags: Tags.
    """
    return n


@tool
def pick(unit: str) -> str:
    """Pick."""
    return unit


pick.parameters["properties"]["unit"]["enum"] = ["c", "f"]
pick.parameters["additionalProperties"] = False
GUARD = ToolGuard(ToolRegistry([get, pick]), settings=ToolsConfig(), health=HealthBoard())


def check_result(result) -> None:
    body = json.loads(result.content)
    if not result.ok:
        assert result.error_code in FAILURE_CLASSES
        assert body["error"] == result.error_code and 0 < len(body["message"]) <= 1_100


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_parser_then_guard_never_raise_and_stay_fast(text):
    start = time.perf_counter()
    action = parse_action(text)
    for err in action.errors:
        assert err.code in PARSE_ERROR_CODES
        assert "<tool_call>" in err.message and len(err.message) < 600
    for call in action.tool_calls:
        check_result(GUARD.call(call))
    assert time.perf_counter() - start < 0.5


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([get, pick]), JSON, st.booleans())
def test_validator_never_raises_and_names_the_tool(t, arguments, coerce):
    start = time.perf_counter()
    args, error, coerced = validate_arguments(t, arguments, coerce=coerce)
    assert time.perf_counter() - start < 0.2
    if error is not None:
        assert error.startswith(f"{t.name}: ") and len(error) < 500 and coerced == []
    else:
        assert isinstance(args, dict)
    check_result(GUARD.call(ToolCall(t.name, arguments if isinstance(arguments, dict) else {})))


def test_huge_and_deep_arguments():
    huge = "<tool_call>" + json.dumps({"name": "get", "arguments": {"n": "9" * 1_000_000}})
    start = time.perf_counter()
    action = parse_action(huge + "</tool_call>")
    assert [e.code for e in action.errors] == ["too_large"]
    deep = {"n": 1, "tags": [[[[[[["x"]]]]]]]}
    for _ in range(500):
        deep = {"n": 1, "tags": [deep]}
    result = GUARD.call(ToolCall("get", deep))
    assert result.error_code == "invalid_arguments"
    assert json.loads(result.content)["message"] == "get: arguments are nested too deeply."
    big = GUARD.call(ToolCall("pick", {"unit": "x" * 1_000_000}))
    assert len(big.content) < 400 and "must be one of ['c', 'f']" in big.content
    assert time.perf_counter() - start < 2.0
