"""parse_action: well-formed calls, every malformed shape from DESIGN, and the contract under
fuzzing: never raises, bounded time, a call attempt is never taken for a final answer, every
error names what is wrong and how a call must look, and generated calls round-trip exactly."""

from __future__ import annotations

import json
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.chat.parser import CLOSE, MAX_CALL_CHARS, MAX_CALLS, OPEN, parse_action
from agentrl.tools.guard import ToolGuard
from agentrl.tools.health import HealthBoard
from agentrl.tools.registry import ToolRegistry, tool
from agentrl.tools.settings import ToolsConfig
from agentrl.types import PARSE_ERROR_CODES, ParsedAction, ToolCall

HINT = 'Write calls as <tool_call>{"name": "tool_name", "arguments": {...}}</tool_call>.'
KEY_FACT = {  # what each error's message must say, besides the format hint
    "unclosed_tag": "never closed with </tool_call>",
    "invalid_json": "JSON",
    "missing_name": 'no "name" string',
    "bad_arguments": '"arguments" of',
    "empty_call": "block is empty",
    "stray_close_tag": "</tool_call> appeared without <tool_call>",
    "too_large": f"the limit is {MAX_CALL_CHARS}",
    "too_many_calls": f"at most {MAX_CALLS} tool calls",
}
PARSE_SECONDS = 1.0  # generous: the machine is shared; a pathological case takes far longer


def codes(action: ParsedAction) -> list[str]:
    return [e.code for e in action.errors]


def timed_parse(text: str) -> ParsedAction:
    """parse_action, checked against the contract that holds for any input."""
    start = time.perf_counter()
    action = parse_action(text)
    assert time.perf_counter() - start < PARSE_SECONDS
    assert len(action.tool_calls) + len(action.errors) <= MAX_CALLS + 1  # + too_many_calls
    for err in action.errors:
        assert err.code in PARSE_ERROR_CODES
        detail = err.message.removesuffix(HINT)
        assert detail != err.message and detail.strip(), err.message  # what is wrong + how
        assert KEY_FACT[err.code] in detail, (err.code, err.message)
        assert len(err.message) < 600
    for call in action.tool_calls:
        assert call.name == call.name.strip() != "" and isinstance(call.arguments, dict)
    # A call attempt (either tag) always surfaces as a call or an error, never as an answer.
    assert action.is_final_answer == (OPEN not in text and CLOSE not in text)
    return action


def test_every_error_code_has_a_key_fact():
    assert set(KEY_FACT) == set(PARSE_ERROR_CODES)


# --- the DESIGN cases, one by one, with the exact outcome ------------------------------


def test_well_formed_call_qwen_layout():
    a = timed_parse(
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    assert a.tool_calls == (ToolCall("get_weather", {"city": "Paris"}),)
    assert a.text == "" and a.errors == () and not a.is_final_answer


def test_plain_answer_is_final():
    a = timed_parse("  It is 21°C and sunny in Paris.  ")
    assert a.text == "It is 21°C and sunny in Paris." and a.is_final_answer


def test_unclosed_tag():
    a = timed_parse('<tool_call>{"name": "f", "arguments": {}')
    assert codes(a) == ["unclosed_tag"] and a.tool_calls == ()
    assert a.errors[0].message == (
        f"<tool_call> was opened but never closed with </tool_call>. {HINT}"
    )


def test_unclosed_tag_after_a_good_call_keeps_the_good_call():
    a = timed_parse('<tool_call>{"name": "f", "arguments": {}}</tool_call> then <tool_call>{"n')
    assert a.tool_calls == (ToolCall("f", {}),) and codes(a) == ["unclosed_tag"]
    assert a.text == "then"


def test_single_quotes_are_repaired():
    a = timed_parse("<tool_call>{'name': 'f', 'arguments': {'a': 'b'}}</tool_call>")
    assert a.tool_calls == (ToolCall("f", {"a": "b"}),) and a.errors == ()


def test_mixed_quotes_are_invalid_json_with_the_decoder_reason():
    a = timed_parse("<tool_call>{'name': \"f\"}</tool_call>")
    assert codes(a) == ["invalid_json"] and a.tool_calls == ()
    assert "not valid JSON (Expecting property name enclosed in double quotes" in (
        a.errors[0].message
    )


def test_trailing_commas_and_python_literals_are_repaired():
    a = timed_parse('<tool_call>{"name": "f", "arguments": {"a": 1,},}</tool_call>')
    assert a.tool_calls == (ToolCall("f", {"a": 1}),) and a.errors == ()
    a = timed_parse('<tool_call>{"name": "f", "arguments": {"t": True, "n": None}}</tool_call>')
    assert a.tool_calls == (ToolCall("f", {"t": True, "n": None}),)


def test_arguments_as_a_json_string():
    a = timed_parse(r'<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>')
    assert a.tool_calls == (ToolCall("f", {"a": 1}),) and a.errors == ()


def test_arguments_as_a_string_that_is_not_json():
    a = timed_parse('<tool_call>{"name": "f", "arguments": "nope"}</tool_call>')
    assert codes(a) == ["bad_arguments"] and a.tool_calls == ()
    assert a.errors[0].message.startswith("\"arguments\" of 'f' is a string that is not JSON.")


def test_arguments_as_a_list():
    a = timed_parse('<tool_call>{"name": "f", "arguments": [1]}</tool_call>')
    assert codes(a) == ["bad_arguments"]
    assert a.errors[0].message.startswith("\"arguments\" of 'f' must be an object, got list.")


def test_arguments_null_or_missing_mean_no_arguments():
    for body in ('{"name": "f", "arguments": null}', '{"name": "f"}'):
        a = timed_parse(f"<tool_call>{body}</tool_call>")
        assert a.tool_calls == (ToolCall("f", {}),) and a.errors == ()


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key


def test_unknown_name_parses_then_the_guard_names_the_tools_there_are():
    a = timed_parse('<tool_call>{"name": "no_such_tool", "arguments": {"x": 1}}</tool_call>')
    assert a.tool_calls == (ToolCall("no_such_tool", {"x": 1}),)  # the parser knows no tools
    guard = ToolGuard(ToolRegistry([lookup]), settings=ToolsConfig(), health=HealthBoard())
    result = guard.call(a.tool_calls[0])
    assert not result.ok and result.error_code == "unknown_tool"
    assert json.loads(result.content)["message"] == (
        "No tool named 'no_such_tool'. Available tools: lookup."
    )


def test_missing_or_empty_or_non_string_name():
    for body in ('{"arguments": {}}', '{"name": "", "arguments": {}}', '{"name": "  "}'):
        a = timed_parse(f"<tool_call>{body}</tool_call>")
        assert codes(a) == ["missing_name"] and a.tool_calls == ()
        assert a.errors[0].message == f'The tool call has no "name" string. {HINT}'
    assert codes(timed_parse('<tool_call>{"name": 123}</tool_call>')) == ["missing_name"]
    padded = timed_parse('<tool_call>{"name": " f "}</tool_call>')
    assert padded.tool_calls == (ToolCall("f", {}),)


def test_not_an_object_empty_stray_and_not_json():
    a = timed_parse('<tool_call>["f", {}]</tool_call>')
    assert a.errors[0].message == f"A tool call must be a JSON object, got list. {HINT}"
    assert codes(timed_parse("<tool_call></tool_call>")) == ["empty_call"]
    a = timed_parse("<tool_call>hello</tool_call>")
    assert codes(a) == ["invalid_json"] and "not valid JSON" in a.errors[0].message
    stray = timed_parse("abc </tool_call>")
    assert codes(stray) == ["stray_close_tag"] and stray.text == "abc"


def test_one_megabyte_arguments_too_large_fast():
    big = '<tool_call>{"name": "f", "arguments": {"s": "' + "x" * 1_000_000 + '"}}</tool_call>'
    a = timed_parse(big)  # bounded time checked inside
    assert codes(a) == ["too_large"] and a.tool_calls == ()
    body_len = len(big) - len(OPEN) - len(CLOSE)
    assert a.errors[0].message.startswith(
        f"The tool call is {body_len} characters; the limit is {MAX_CALL_CHARS}."
    )
    unclosed = timed_parse(big.removesuffix(CLOSE) + " and a good call after it")
    assert codes(unclosed) == ["too_large"]


def test_one_megabyte_of_free_text_around_a_call_is_fast():
    text = "x" * 500_000 + '<tool_call>{"name": "f", "arguments": {}}</tool_call>' + "y" * 500_000
    a = timed_parse(text)
    assert a.tool_calls == (ToolCall("f", {}),) and len(a.text) == 1_000_000


def test_deep_nesting_is_an_error_not_a_crash():
    a = timed_parse("<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>")
    assert codes(a) == ["invalid_json"] and "recursion" in a.errors[0].message
    inside = '{"name": "f", "arguments": {"a": ' + "[" * 5000 + "]" * 5000 + "}}"
    a = timed_parse(f"<tool_call>{inside}</tool_call>")
    assert codes(a) == ["invalid_json"] and a.tool_calls == ()


def test_moderate_nesting_parses_exactly():
    value: object = "leaf"
    for _ in range(50):
        value = {"k": [value]}
    a = timed_parse(f"<tool_call>{json.dumps({'name': 'f', 'arguments': value})}</tool_call>")
    assert a.tool_calls == (ToolCall("f", value),)


def test_close_tag_inside_a_string():
    a = timed_parse('<tool_call>{"name": "f", "arguments": {"s": "a</tool_call>b"}}</tool_call>')
    assert a.tool_calls == (ToolCall("f", {"s": "a</tool_call>b"}),) and a.errors == ()


def test_close_tag_inside_a_string_of_a_broken_call_is_an_error_not_a_call():
    a = timed_parse('<tool_call>{"name": "f", "arguments": {"s": "</tool_call>"}</tool_call>')
    assert a.tool_calls == () and codes(a) == ["invalid_json", "stray_close_tag"]


def test_several_calls_and_free_text():
    a = timed_parse(
        'Let me check. <tool_call>{"name": "f", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "g", "arguments": {"x": "y"}}</tool_call> Done.'
    )
    assert a.tool_calls == (ToolCall("f", {}), ToolCall("g", {"x": "y"}))
    assert a.text == "Let me check.  Done." and a.errors == ()


def test_several_calls_stop_at_the_cap():
    text = "".join(f'<tool_call>{{"name": "f{i}"}}</tool_call>' for i in range(MAX_CALLS + 4))
    a = timed_parse(text)
    assert a.tool_calls == tuple(ToolCall(f"f{i}", {}) for i in range(MAX_CALLS))
    assert codes(a) == ["too_many_calls"]  # the model is told, not silently cut
    assert a.errors[0].message.startswith("A turn runs at most 16 tool calls; 4 more were not run.")


def test_code_fences_inside_and_outside():
    inside = '<tool_call>\n```json\n{"name": "f", "arguments": {}}\n```\n</tool_call>'
    outside = '```json\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n```'
    python = '<tool_call>\n```python\n{"name": "f", "arguments": {}}\n```\n</tool_call>'
    for text in (inside, outside, python):
        a = timed_parse(text)
        assert a.tool_calls == (ToolCall("f", {}),) and a.errors == () and a.text == ""


def test_huge_inputs_stay_bounded():
    cases = {
        OPEN * 100_000: ["too_large"],
        CLOSE * 100_000: ["stray_close_tag"] * MAX_CALLS,
        "<tool_call>{}</tool_call>" * 10_000: ["missing_name"] * MAX_CALLS + ["too_many_calls"],
        OPEN + '{"a": ' * 10_000: ["unclosed_tag"],
        OPEN + "{" * 60_000 + CLOSE: ["invalid_json"],
    }
    for text, expected in cases.items():
        assert codes(timed_parse(text)) == expected


# --- fuzzing ---------------------------------------------------------------------------

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
STRINGS = st.text(max_size=12) | st.sampled_from(
    [OPEN, CLOSE, "a</tool_call>b", "'", '"', "```", "{", "}", "\\", '{"name": "x"}', "None"]
)
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | STRINGS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(STRINGS, inner, max_size=4),
    max_leaves=15,
)
ARGS = st.dictionaries(STRINGS, VALUES, max_size=4)
FREE = st.text(max_size=20).filter(lambda s: "`" not in s and OPEN not in s and CLOSE not in s)
LAYOUTS = ("{}", "\n{}\n", "\n```json\n{}\n```\n", "```\n{}\n```")


@st.composite
def call_texts(draw) -> tuple[str, list[ToolCall], str]:
    """Text of 1-4 valid calls between free text: (text, the calls, the expected free text)."""
    calls, parts, free = [], [], [draw(FREE)]
    for _ in range(draw(st.integers(1, 4))):
        name, args = draw(NAMES), draw(ARGS)
        how = draw(st.sampled_from(["object", "string", "parameters", "omitted"]))
        obj: dict = {"name": name}
        if how == "string":
            obj["arguments"] = json.dumps(args)
        elif how == "parameters":
            obj["parameters"] = args
        elif how == "object" or args:
            obj["arguments"] = args
        body = json.dumps(
            obj, indent=draw(st.sampled_from([None, 2])), ensure_ascii=draw(st.booleans())
        )
        parts.append(OPEN + draw(st.sampled_from(LAYOUTS)).format(body) + CLOSE)
        calls.append(ToolCall(name, args))
        free.append(draw(FREE))
    text = free[0] + "".join(p + f for p, f in zip(parts, free[1:], strict=True))
    return text, calls, "".join(free).strip()


@settings(max_examples=300, deadline=None)
@given(call_texts())
def test_generated_calls_round_trip_exactly(case):
    text, calls, free = case
    a = timed_parse(text)
    assert a.errors == ()
    assert a.tool_calls == tuple(calls)
    assert a.text == free


@settings(max_examples=200, deadline=None)
@given(call_texts(), st.data())
def test_a_cut_off_last_call_is_an_error_never_a_call(case, data):
    text, calls, _ = case
    last_open = text.rindex(OPEN)
    last_end = text.rindex(CLOSE) + len(CLOSE)
    cut = data.draw(st.integers(last_open + len(OPEN), last_end - 1))
    a = timed_parse(text[:cut])
    assert a.tool_calls == tuple(calls[:-1])
    assert a.errors, "a cut-off call must come back as an error"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_keeps_the_contract(text):
    a = timed_parse(text)
    if OPEN not in text and CLOSE not in text and "`" not in text:
        assert a == ParsedAction(text.strip())


TAG_SOUP = st.lists(
    st.sampled_from(
        [
            OPEN, CLOSE, "{", "}", '"name"', ":", '"f"', ",", '"arguments"', "'", "```",
            "```json\n", "x", "\n", "[", "]", "null", '""', '"', "\\", "True", "1e999", "NaN",
            '{"name": "f", "arguments": {"a": 1}}', '"arguments": "{\\"a\\": 1}"',
        ]
    ),
    max_size=60,
).map("".join)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(TAG_SOUP)
def test_tag_soup_keeps_the_contract(text):
    timed_parse(text)  # the contract's checks are inside
