"""Reward layers and the shaper, against numbers worked out by hand."""

from __future__ import annotations

import pytest

from agentrl.rewards import (
    DEFAULT_WEIGHTS,
    PROCESS_WEIGHTS,
    RewardShaper,
    argument_coverage,
    count_repeats,
    format_score,
    normalize_value,
    resolve_weights,
    tool_choice_score,
    turn_argument_score,
)
from agentrl.types import ParsedAction, ParseError, ToolCall

PARIS = ToolCall("get_weather", {"city": "Paris"})
OSLO = ToolCall("get_weather", {"city": "Oslo"})
TIME = ToolCall("get_local_time", {"city": "Paris"})


def test_weights_defaults_rise_and_unknown_key_is_named():
    w = DEFAULT_WEIGHTS
    assert w["format"] < w["tool_choice"] < w["arguments"] < w["completion"]
    assert resolve_weights({"format": 0.5})["format"] == 0.5
    assert resolve_weights(None) == {**DEFAULT_WEIGHTS, **PROCESS_WEIGHTS}
    assert PROCESS_WEIGHTS == {"progress": 0.3, "reask": -0.1, "plan": 0.2}
    with pytest.raises(ValueError, match=r"'speed'.*allowed: format, tool_choice.*progress, reask"):
        resolve_weights({"speed": 1.0})


def test_shaper_keeps_process_weights_out_of_its_breakdown():
    shaper = RewardShaper({"progress": 0.5, "format": 0.2})
    assert shaper.process_weights == {"progress": 0.5, "reask": -0.1, "plan": 0.2}
    assert shaper.weights == {**DEFAULT_WEIGHTS, "format": 0.2}
    assert set(shaper.breakdown(success=True).weights) == set(DEFAULT_WEIGHTS)


def test_normalize_value():
    assert normalize_value({"city": "  PARIS ", "n": [" A", 2]}) == {"city": "paris", "n": ["a", 2]}


def test_format_score():
    assert format_score(ParsedAction("", (PARIS,))) == 1.0
    assert format_score(ParsedAction("It is 3°C.")) == 1.0
    assert format_score(ParsedAction("")) == 0.0  # empty reply
    assert format_score(ParsedAction("", (PARIS,), (ParseError("invalid_json", "m"),))) == 0.0


def test_tool_choice_and_turn_arguments():
    assert tool_choice_score([PARIS, TIME], {"get_weather"}) == 0.5
    assert tool_choice_score([], {"get_weather"}) is None
    made = [ToolCall("get_weather", {"city": " paris"}), ToolCall("get_weather", {"city": "Rome"})]
    assert turn_argument_score(made, [PARIS, OSLO]) == 0.5


def test_argument_coverage():
    made = [ToolCall("get_weather", {"city": "PARIS "}), TIME, TIME]
    assert argument_coverage(made, [PARIS, OSLO]) == 0.5
    assert argument_coverage(made + [OSLO], [PARIS, OSLO]) == 1.0
    assert argument_coverage([], []) == 1.0


def test_count_repeats_retry_after_error_is_not_a_repeat():
    history = [(PARIS, False), (PARIS, True), (PARIS, True), (OSLO, True), (PARIS, False)]
    # 1st: fault; 2nd: retry after an error (not a repeat); 3rd and 5th repeat a success.
    assert count_repeats(history) == 2
    assert count_repeats([]) == 0


def test_shaper_hand_computed():
    shaper = RewardShaper({"repeat": -0.5})
    shaper.reset([PARIS, OSLO])
    t1 = shaper.add_turn(ParsedAction("", (TIME,)), [True])
    t2 = shaper.add_turn(ParsedAction("", (PARIS, OSLO)), [True, False])
    t3 = shaper.add_turn(ParsedAction("<tool_call>x", (), (ParseError("unclosed_tag", "m"),)), [])
    t4 = shaper.add_turn(ParsedAction("", (PARIS, OSLO)), [True, True])
    assert t1 == {"format": 1.0, "repeat": 0.0, "tool_choice": 0.0, "arguments": 0.0}
    assert t2 == {"format": 1.0, "repeat": 0.0, "tool_choice": 1.0, "arguments": 1.0}
    assert t3 == {"format": 0.0, "repeat": 0.0}
    assert t4 == {"format": 1.0, "repeat": 1.0, "tool_choice": 1.0, "arguments": 1.0}
    b = shaper.breakdown(success=False)
    # format (1+1+0+1)/4; tool_choice (0+1+1)/3; both expected calls made; one repeat.
    assert b.layers == {
        "format": 0.75,
        "tool_choice": 2 / 3,
        "arguments": 1.0,
        "completion": 0.0,
        "repeat": 1.0,
    }
    assert b.total == pytest.approx(0.1 * 0.75 + 0.2 * 2 / 3 + 0.3 * 1.0 + 0.0 - 0.5 * 1.0)
    assert b.per_turn == [t1, t2, t3, t4]


def test_shaper_no_calls():
    shaper = RewardShaper()
    shaper.reset([PARIS])
    shaper.add_turn(ParsedAction("It is sunny."), [])
    answered_blind = shaper.breakdown(success=False)
    assert answered_blind.layers["tool_choice"] == 0.0  # calls were needed: no free credit
    assert answered_blind.layers["format"] == 0.0  # nor format credit for skipping the tools
    assert answered_blind.total == pytest.approx(0.0)
    # a well-formed call with a wrong argument beats answering blind
    shaper.reset([PARIS])
    shaper.add_turn(ParsedAction("", (ToolCall("get_weather", {"city": "Rome"}),)), [True])
    shaper.add_turn(ParsedAction("It is sunny."), [])
    assert shaper.breakdown(success=False).total == pytest.approx(0.1 + 0.2)
    shaper.reset([])
    shaper.add_turn(ParsedAction("Hello!"), [])
    assert shaper.breakdown(success=True).layers["tool_choice"] == 1.0
    assert shaper.breakdown(success=True).total == pytest.approx(0.1 + 0.2 + 0.3 + 1.0)


def test_shaper_rejects_mismatched_outcomes():
    with pytest.raises(ValueError, match="1 outcomes for 2 tool calls"):
        RewardShaper().add_turn(ParsedAction("", (PARIS, OSLO)), [True])
