"""parse_action: well-formed calls, every malformed shape from DESIGN, and totality."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.chat.parser import parse_action
from agentrl.types import ParsedAction, ToolCall


def codes(action: ParsedAction) -> list[str]:
    return [e.code for e in action.errors]


def test_well_formed_call_qwen_layout():
    a = parse_action(
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    assert a.tool_calls == (ToolCall("get_weather", {"city": "Paris"}),)
    assert a.text == "" and a.errors == () and not a.is_final_answer


def test_several_calls_and_free_text():
    a = parse_action(
        'Let me check. <tool_call>{"name": "f", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "g", "arguments": {"x": "y"}}</tool_call> Done.'
    )
    assert a.tool_calls == (ToolCall("f", {}), ToolCall("g", {"x": "y"}))
    assert a.text == "Let me check.  Done."


def test_plain_answer_is_final():
    a = parse_action("  It is 21°C and sunny in Paris.  ")
    assert a.text == "It is 21°C and sunny in Paris." and a.is_final_answer


def test_unclosed_tag():
    a = parse_action('<tool_call>{"name": "f", "arguments": {}')
    assert codes(a) == ["unclosed_tag"] and a.tool_calls == ()
    assert "</tool_call>" in a.errors[0].message  # tells the model how a call looks


def test_lenient_repairs_single_quotes_and_trailing_commas():
    assert parse_action(
        "<tool_call>{'name': 'f', 'arguments': {'a': 'b'}}</tool_call>"
    ).tool_calls == (ToolCall("f", {"a": "b"}),)
    assert parse_action(
        '<tool_call>{"name": "f", "arguments": {"a": 1,},}</tool_call>'
    ).tool_calls == (ToolCall("f", {"a": 1}),)


def test_arguments_as_string_list_null():
    as_json_string = r'<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>'
    assert parse_action(as_json_string).tool_calls == (ToolCall("f", {"a": 1}),)
    assert codes(parse_action('<tool_call>{"name": "f", "arguments": "nope"}</tool_call>')) == [
        "bad_arguments"
    ]
    assert codes(parse_action('<tool_call>{"name": "f", "arguments": [1]}</tool_call>')) == [
        "bad_arguments"
    ]
    assert parse_action('<tool_call>{"name": "f", "arguments": null}</tool_call>').tool_calls == (
        ToolCall("f", {}),
    )


def test_missing_name_empty_stray_and_not_json():
    assert codes(parse_action('<tool_call>{"arguments": {}}</tool_call>')) == ["missing_name"]
    assert codes(parse_action("<tool_call></tool_call>")) == ["empty_call"]
    assert codes(parse_action("<tool_call>hello</tool_call>")) == ["invalid_json"]
    stray = parse_action("abc </tool_call>")
    assert codes(stray) == ["stray_close_tag"] and stray.text == "abc"


def test_close_tag_inside_a_string():
    a = parse_action('<tool_call>{"name": "f", "arguments": {"s": "a</tool_call>b"}}</tool_call>')
    assert a.tool_calls == (ToolCall("f", {"s": "a</tool_call>b"}),) and a.errors == ()


def test_code_fences_inside_and_outside():
    inside = '<tool_call>\n```json\n{"name": "f", "arguments": {}}\n```\n</tool_call>'
    outside = '```json\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n```'
    for text in (inside, outside):
        a = parse_action(text)
        assert a.tool_calls == (ToolCall("f", {}),) and a.errors == () and a.text == ""


def test_one_megabyte_arguments_too_large_fast():
    big = '<tool_call>{"name": "f", "arguments": {"s": "' + "x" * 1_000_000 + '"}}</tool_call>'
    start = time.perf_counter()
    a = parse_action(big)
    assert codes(a) == ["too_large"] and a.tool_calls == ()
    assert time.perf_counter() - start < 1.0


def test_deep_nesting_is_an_error_not_a_crash():
    a = parse_action("<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>")
    assert codes(a) == ["invalid_json"]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_never_raises_on_any_text(text):
    assert isinstance(parse_action(text), ParsedAction)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "<tool_call>",
                "</tool_call>",
                "{",
                "}",
                '"name"',
                ":",
                '"f"',
                ",",
                '"arguments"',
                "'",
                "```",
                "x",
                "\n",
                "[",
                "]",
                "null",
            ]
        )
    )
)
def test_never_raises_on_tag_soup(tokens):
    assert isinstance(parse_action("".join(tokens)), ParsedAction)
