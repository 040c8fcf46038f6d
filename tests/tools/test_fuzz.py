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
from agentrl.tools.registry import ToolRegistry, tool, tool_from_schema
from agentrl.tools.settings import ToolsConfig
from agentrl.tools.validate import validate_arguments
from agentrl.types import PARSE_ERROR_CODES, ToolCall

FRAGMENTS = st.sampled_from(
    [
        "<tool_call>", "</tool_call>", "{", "}", "[", "]", '"', "'", ",", ":", "```", "```json\n",
        '"name"', '"arguments"', '"get"', '"pick"', "null", "true", "1e999", "\\", "\n", " ",
        '{"name": "get", "arguments": {"n": 3}}', '"arguments": "{\\"n\\": 1}"', "None",
        '{"name": "pick", "arguments": {"unit": "k"}}', "</tool_call> in a string", "é",
        '<tool_call>{"name": "get", "arguments": {"n": "3"}}</tool_call>',
        '<tool_call>{"name": "pick", "arguments": {"unit": "f"}}</tool_call>',
        '<tool_call>{"name": "nope", "arguments": {}}</tool_call>',
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


def check_result(call: ToolCall, result) -> None:
    """The guard's answer is the one the call deserves: unknown tool, the validator's own
    message, or the tool's return value (``get`` returns ``n``, ``pick`` returns ``unit``)."""
    assert result.name == call.name
    t = GUARD.registry.get(call.name)
    args, error, _ = ({}, None, []) if t is None else validate_arguments(t, call.arguments)
    body = {} if result.ok else json.loads(result.content)
    if not result.ok:
        assert result.error_code in FAILURE_CLASSES and body["error"] == result.error_code
        assert 0 < len(body["message"]) <= 1_100
    if t is None:
        assert result.error_code == "unknown_tool"
        assert body["message"] == f"No tool named {call.name!r}. Available tools: get, pick."
    elif error is not None:
        assert result.error_code == "invalid_arguments" and body["message"] == error
    else:
        assert result.ok, result.content
        assert result.content == (args["unit"] if t is pick else json.dumps(args["n"]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_parser_then_guard_never_raise_and_stay_fast(text):
    start = time.perf_counter()
    action = parse_action(text)
    for err in action.errors:
        assert err.code in PARSE_ERROR_CODES
        assert "<tool_call>" in err.message and len(err.message) < 600
    for call in action.tool_calls:
        check_result(call, GUARD.call(call))
    assert time.perf_counter() - start < 0.5


ERROR_FACTS = (
    "unknown argument",
    "is a required property",
    "Additional properties are not allowed",
    "must be of type",
    "must be one of",
    "arguments must be an object, got",
    "arguments are nested too deeply",
    "is invalid:",
)


def is_integer(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == int(value)


def check_valid(t, arguments, args, coerced, coerce) -> None:
    """Accepted arguments really fit the schema; only coercion may change them, and only
    the strings it names."""
    if t is get:  # its schema (made by @tool) does not forbid other keys
        assert is_integer(args["n"])
        assert args.get("tags") is None or all(isinstance(x, str) for x in args["tags"])
    else:
        assert args == {"unit": args["unit"]} and args["unit"] in ("c", "f")
    if not coerce or not coerced:
        assert args is arguments and coerced == []
    else:
        assert set(args) == set(arguments) and set(coerced) <= set(args)
        for name in args:
            same = args[name] is arguments[name]
            assert same != (name in coerced), name
            assert same or (isinstance(arguments[name], str) and not isinstance(args[name], str))


NEAR = st.sampled_from(["3", " 7 ", "-2", "1.5", "c", "f", "k", "true", 3, 2.0, 1.5, True, None])
NEAR_MISSES = st.fixed_dictionaries(  # close to valid, so the accepting branch runs often too
    {},
    optional={
        "n": NEAR | JSON,
        "tags": st.lists(st.text(max_size=3), max_size=3) | NEAR,
        "unit": NEAR,
        "x": NEAR,
    },
)
ALMOST = st.fixed_dictionaries(  # valid or one step off, for either tool
    {"n": st.integers() | st.sampled_from(["3", " 7 ", "-2", 2.0, "x"])},
    optional={"tags": st.lists(st.text(max_size=3), max_size=2) | st.none(), "x": NEAR},
) | st.fixed_dictionaries({"unit": st.sampled_from(["c", "f", "k"])}, optional={"x": NEAR})


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([get, pick]), ALMOST | NEAR_MISSES | JSON, st.booleans())
def test_validator_never_raises_and_names_the_tool(t, arguments, coerce):
    start = time.perf_counter()
    args, error, coerced = validate_arguments(t, arguments, coerce=coerce)
    assert time.perf_counter() - start < 0.2
    if error is not None:
        assert error.startswith(f"{t.name}: ") and len(error) < 500 and coerced == []
        assert any(fact in error for fact in ERROR_FACTS), error  # names what is wrong
    else:
        check_valid(t, arguments, args, coerced, coerce)
    call = ToolCall(t.name, arguments if isinstance(arguments, dict) else {})
    check_result(call, GUARD.call(call))


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


def test_an_unknown_argument_name_is_invalid_arguments():
    result = GUARD.call(ToolCall("get", {"n": 3, "x": 1}))
    assert result.error_code == "invalid_arguments"
    assert json.loads(result.content)["message"] == (
        "get: unknown argument 'x'; its arguments are: n, tags."
    )
    # a schema that admits extra keys lets them through to the tool
    t = tool_from_schema("free", "Free.", {**get.parameters, "additionalProperties": True},
                         lambda **kw: sorted(kw), get.policy)  # fmt: skip
    assert validate_arguments(t, {"n": 1, "x": 2}) == ({"n": 1, "x": 2}, None, [])
