"""ToolTaskEnv: the API the rollout calls, a scripted episode's reward, every way to end."""

from __future__ import annotations

import json

import pytest

import agentrl.envs as envs
from agentrl.envs import TaskInstance, ToolTaskEnv, WeatherFamily
from agentrl.tools.settings import ToolsConfig
from agentrl.types import RewardBreakdown, ToolCall, ToolResult


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def paris_oslo() -> TaskInstance:
    """Level 2: Paris 21°C sunny vs Oslo 3°C snowy."""
    world = {
        "Paris": {"temperature_c": 21, "condition": "sunny", "time": "14:05"},
        "Oslo": {"temperature_c": 3, "condition": "snowy", "time": "14:05"},
    }
    return TaskInstance(
        "t-1",
        2,
        "Which is warmer, Paris or Oslo?",
        {
            "world": world,
            "cities": ["Paris", "Oslo"],
            "target": "Paris",
            "superlative": "warmer",
            "fault_seed": 0,
        },
        [ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Oslo"})],
    )


@pytest.fixture
def env() -> ToolTaskEnv:
    return envs.make("weather", fault_rate=0.0)


def test_reset_gives_system_and_user_and_is_deterministic(env):
    messages, info = env.reset(seed=123, options={"level": 2})
    assert [m["role"] for m in messages] == ["system", "user"]
    assert info["level"] == 2 and info["task_id"].startswith("weather-L2-")
    assert env.reset(seed=123, options={"level": 2}) == (messages, info)
    assert env.messages == messages
    names = [s["function"]["name"] for s in env.tool_schemas]
    assert names == ["get_weather", "get_local_time"] and env.max_turns == 6
    with pytest.raises(ValueError, match=r"level 9 is not one of 'weather'"):
        env.reset(seed=1, options={"level": 9})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(seed=1, options={"difficulty": 2})


def test_scripted_episode_reward_hand_computed(env):
    env.reset(seed=0, options={"instance": paris_oslo()})
    # Turn 1: the distractor tool (parses; wrong tool; no expected call covered).
    obs, r, term, trunc, info = env.step(call("get_local_time", city="Paris"))
    assert obs == [
        {"role": "tool", "name": "get_local_time", "content": '{"city": "Paris", "time": "14:05"}'}
    ]
    assert (r, term, trunc) == (0.0, False, False)
    assert info["tool_calls"] == [
        {
            "name": "get_local_time",
            "arguments": {"city": "Paris"},
            "ok": True,
            "error_code": None,
            "content": obs[0]["content"],
            "truncated_output": False,
            "coerced": [],
        }
    ]
    # Turn 2: a valid call (lower case, padded) plus a malformed one -> format 0 this turn.
    raw = call("get_weather", city=" paris") + "<tool_call>oops</tool_call>"
    obs, r, term, trunc, info = env.step(raw)
    assert [m["role"] for m in obs] == ["tool", "tool"]
    assert json.loads(obs[0]["content"])["temperature_c"] == 21
    assert json.loads(obs[1]["content"])["code"] == "invalid_json"
    assert info["parse_errors"] == ["invalid_json"] and not (term or trunc)
    assert env.messages[-3] == {"role": "assistant", "content": raw}  # raw text kept
    # Turn 3: Paris again (a repeat after success) and Oslo.
    env.step(call("get_weather", city="Paris") + "\n" + call("get_weather", city="Oslo"))
    assert env.messages[-3]["tool_calls"][1] == {
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
    }
    # Turn 4: the answer.
    obs, r, term, trunc, info = env.step("Paris is warmer: 21°C vs 3°C in Oslo.")
    assert obs == [] and (term, trunc) == (True, False)
    assert env.messages[-1] == {
        "role": "assistant",
        "content": "Paris is warmer: 21°C vs 3°C in Oslo.",
    }
    assert info["termination"] == "success" and info["success"] is True
    b = info["reward"]
    assert b.layers == {
        "format": 0.75,
        "tool_choice": 2 / 3,
        "arguments": 1.0,
        "completion": 1.0,
        "repeat": 1.0,
    }
    # 0.1*0.75 + 0.2*2/3 + 0.3*1 + 1.0*1 - 0.1*1 = 1.408333...
    assert r == b.total == pytest.approx(1.4083333333333333)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("again")


def test_wrong_answer_fails(env):
    env.reset(seed=0, options={"instance": paris_oslo()})
    _, r, term, _, info = env.step("Oslo is warmer.")
    assert term and info["termination"] == "failure" and not info["success"]
    assert info["reward"].layers["tool_choice"] == 0.0
    assert info["reward"].layers["format"] == 0.0  # answered without the needed calls
    assert r == pytest.approx(0.0)


def test_parse_error_continues_and_max_turns_truncates(env):
    env.reset(seed=5, options={"level": 1})
    for turn in range(1, 7):
        obs, r, term, trunc, info = env.step('<tool_call>{"name": "get_weather"')
        body = json.loads(obs[0]["content"])
        assert obs[0]["role"] == "tool" and body["error"] == "parse_error"
        assert body["code"] == "unclosed_tag" and not term
        assert trunc is (turn == 6)
    assert info["termination"] == "max_turns" and r == info["reward"].total == 0.0
    assert env.guard.failures[("<parse>", "parse_error")] == 6


def test_finish_by_the_rollout(env):
    env.reset(seed=1, options={"level": 1})
    env.step(env.reference_action())
    b = env.finish("length")
    assert isinstance(b, RewardBreakdown) and env.termination == "length"
    assert b.layers["completion"] == 0.0 and b.layers["arguments"] == 1.0
    assert env.finish("length") is b
    with pytest.raises(ValueError, match="unknown termination 'oops'"):
        env.finish("oops")


def test_reference_action_is_the_template_rendering(env):
    env.reset(seed=0, options={"instance": paris_oslo()})
    assert env.reference_action() == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )


def test_a_family_note_comes_before_the_reference_call(env, monkeypatch):
    """``reference_note``: the generic solver writes the family's line, then its call; the
    stored assistant turn keeps the line as content and the call as a tool call."""
    notes = lambda instance, results: f"{len(results)} cities known."  # noqa: E731
    monkeypatch.setattr(env.family, "reference_note", notes, raising=False)
    env.reset(seed=0, options={"instance": paris_oslo()})
    env.step(env.reference_action())
    assert env.reference_action() == "1 cities known.\n" + call("get_weather", city="Oslo")
    assert env.messages[-2]["content"] == "0 cities known."
    assert env.messages[-2]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_tool_timeout_goes_on_or_ends_the_episode_if_configured(env, monkeypatch):
    env.reset(seed=0, options={"level": 1})
    monkeypatch.setattr(
        env.guard,
        "call",
        lambda c: ToolResult(
            c.name, '{"error": "timeout", "message": "slow"}', ok=False, error_code="timeout"
        ),
    )
    obs, _, term, trunc, info = env.step(env.reference_action())  # default: the model sees it
    assert (term, trunc, "termination" in info) == (False, False, False)
    assert json.loads(obs[0]["content"])["error"] == "timeout"
    env.guard.settings = ToolsConfig(stop_on_timeout=True)
    _, _, term, trunc, info = env.step(env.reference_action())
    assert (term, trunc, info["termination"]) == (False, True, "tool_timeout")


class BrokenVerifier(WeatherFamily):
    def check_answer(self, instance, answer):
        raise KeyError("oops")


def test_harness_error_is_reported_not_raised():
    env = ToolTaskEnv(BrokenVerifier(fault_rate=0.0))
    env.reset(seed=0)
    _, r, term, trunc, info = env.step("It is 3°C.")
    assert (term, trunc, info["termination"]) == (False, True, "harness_error")
    assert "KeyError" in info["error"] and r == info["reward"].total


def test_constructor_errors():
    with pytest.raises(TypeError, match="needs a TaskFamily"):
        ToolTaskEnv(object())
    with pytest.raises(ValueError, match="max_turns"):
        ToolTaskEnv(WeatherFamily(), max_turns=0)
    with pytest.raises(ValueError, match="unknown reward weight 'speed'"):
        ToolTaskEnv(WeatherFamily(), reward_weights={"speed": 1.0})
