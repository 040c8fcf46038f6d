"""The weather family: world sampling, faults, the verifier, and the reference solver."""

from __future__ import annotations

import json
import random

import pytest

import agentrl.envs as envs
from agentrl.envs import TaskInstance, WeatherFamily, run_reference_episode
from agentrl.envs.reference import format_call
from agentrl.envs.tasks.weather import CITIES, first_mentioned, mentioned_numbers
from agentrl.types import ToolCall


def instance(
    level: int, temps: dict[str, int], target: str, sup: str = "warmer", condition: str = "sunny"
) -> TaskInstance:
    world = {
        c: {"temperature_c": t, "condition": condition, "time": "09:30"} for c, t in temps.items()
    }
    cities = list(temps)
    return TaskInstance(
        "t",
        level,
        "?",
        {"world": world, "cities": cities, "target": target, "superlative": sup, "fault_seed": 0},
        [ToolCall("get_weather", {"city": c}) for c in cities],
    )


FAMILY = WeatherFamily()


def test_world_has_many_cities_including_multiword():
    assert len(CITIES) >= 40 and len(set(CITIES)) == len(CITIES)
    assert sum(" " in c for c in CITIES) >= 5


@pytest.mark.parametrize("level", [1, 2, 3])
def test_sample_is_seeded_and_tie_free(level):
    a, b = FAMILY.sample(random.Random(7), level), FAMILY.sample(random.Random(7), level)
    assert a == b and len(a.expected_calls) == level
    for seed in range(200):
        inst = FAMILY.sample(random.Random(seed), level)
        temps = [inst.data["world"][c]["temperature_c"] for c in inst.data["cities"]]
        assert len(set(temps)) == level and all(-10 <= t <= 38 for t in temps)
        assert all(c in inst.prompt for c in inst.data["cities"])


def test_level1_verifier():
    inst = instance(1, {"Paris": 21}, "Paris", condition="sunny")
    good = ["It is 21°C and sunny in Paris.", "Sunny, 21 degrees.", "21°C (70°F), sunshine"]
    bad = [
        "It is sunny in Paris.",  # no temperature
        "It is 22°C and sunny.",  # wrong number
        "It is 21°C and rainy.",  # wrong condition
        "21°C, sunny or rainy or snowy",  # listing guesses
        "It is 21°C or 5°C, sunny.",  # an extra number
        "",
        "21 sunny " * 100,
    ]  # empty, too long
    assert all(FAMILY.check_answer(inst, a) for a in good)
    assert not any(FAMILY.check_answer(inst, a) for a in bad)


def test_level2_verifier():
    inst = instance(2, {"New York": -3, "Cape Town": 24}, "Cape Town")
    good = [
        "Cape Town is warmer: 24°C vs -3°C in New York.",
        "cape town (24°C) is warmer than new york (\u22123°C).",
        "Cape Town is warmer: 24°C (75°F) vs -3°C in New York.",
    ]
    bad = [
        "New York is colder: -3°C vs 24°C in Cape Town.",  # warmer city not first
        "Cape Town is warmer: 24°C.",  # one temperature missing
        "Cape Town is warmer: 24°C vs 3°C in New York.",  # sign lost
        "Cape Town is warmer: -3°C vs 24°C in New York.",  # the two temperatures swapped
        "Cape Town or New York, 24 -3 10",
    ]  # a number that is no temperature
    assert all(FAMILY.check_answer(inst, a) for a in good)
    assert not any(FAMILY.check_answer(inst, a) for a in bad)


def test_level3_verifier():
    inst = instance(3, {"Oslo": 2, "Lima": 19, "Rome": 11}, "Oslo", sup="coldest")
    assert FAMILY.check_answer(inst, "Oslo is the coldest: 2°C (Rome 11°C, Lima 19°C).")
    assert FAMILY.check_answer(inst, "Oslo is coldest, at 2°C; Lima 19°C, Rome 11°C.")
    # no comparison made: the terse form reads like a list in the asked order, which named the
    # target first by chance (accepted until 2026-12-06)
    assert not FAMILY.check_answer(inst, "Oslo, at 2°C; Lima 19°C, Rome 11°C.")
    # a guess after one lookup: the target and its temperature, the others never looked up
    assert not FAMILY.check_answer(inst, "Oslo is the coldest: 2°C.")
    assert not FAMILY.check_answer(inst, "Lima is the warmest; Oslo is coldest at 2°C.")
    assert not FAMILY.check_answer(inst, "Oslo is the coldest.")
    assert not FAMILY.check_answer(inst, "Oslo is the coldest: 11°C (Rome 2°C, Lima 19°C).")


def test_evidence_first_answers_conclude_with_the_target():
    two = instance(2, {"New York": -3, "Cape Town": 24}, "Cape Town")
    three = instance(3, {"Oslo": 2, "Lima": 19, "Rome": 11}, "Oslo", sup="coldest")
    good = [
        (two, "New York -3°C, Cape Town 24°C: Cape Town is warmer."),
        (two, "New York is -3°C and Cape Town 24°C (75°F), so Cape Town is warmer."),
        (three, "Oslo 2°C, Lima 19°C, Rome 11°C: Oslo is the coldest."),
        (two, "New York \u22123°C, Cape Town 24°C: Cape Town is warmer."),  # a Unicode minus
    ]
    bad = [
        (two, "New York -3°C, Cape Town 24°C: New York is warmer."),  # the wrong conclusion
        (two, "New York 24°C, Cape Town -3°C: Cape Town is warmer."),  # temperatures swapped
        (two, "New York -3°C, Cape Town 24°C."),  # no conclusion after the numbers
        (two, "New York -3°C: Cape Town is warmer."),  # one temperature missing
        # the target listed first, concluding another city: the conclusion counts
        (three, "Oslo 2°C, Lima 19°C, Rome 11°C: Lima is the coldest."),
        (two, "New York \u22123°C, Cape Town 24°C: New York is warmer."),
    ]
    assert all(FAMILY.check_answer(inst, a) for inst, a in good)
    assert not any(FAMILY.check_answer(inst, a) for inst, a in bad)


def test_a_list_of_temperatures_without_a_comparison_claims_nothing():
    """The answers an RL policy wrote after tree-search training (2026-12-06): every city with
    its temperature in the asked order and no comparison; they passed whenever the target was
    asked first."""
    two = instance(2, {"Prague": 24, "Dublin": 4}, "Prague")
    three = instance(3, {"Cape Town": 10, "Helsinki": -2, "Chicago": 2}, "Cape Town")
    bad = [
        (three, "Cape Town: 10°C, Helsinki: -2°C, Chicago: 2°C: sunny"),
        (three, "Cape Town: 10°C, sunny. Helsinki: -2°C, sunny. Chicago: 2°C, windy."),
        (two, "Prague: 24°C, rainy. Dublin: 4°C, rainy."),
        # evidence first, then a wrong conclusion that ends on the right name
        (two, "Prague 24°C, Dublin 4°C: Dublin is warmer than Prague."),
    ]
    good = [  # the same facts with the claim made, first or last
        (three, "Cape Town is the warmest: 10°C (Helsinki -2°C, Chicago 2°C)."),
        (three, "Cape Town 10°C, Helsinki -2°C, Chicago 2°C: Cape Town is the warmest."),
        (two, "Prague is warmer: 24°C vs 4°C in Dublin."),
        (two, "Prague 24°C, Dublin 4°C: Prague is warmer than Dublin."),
        (three, "Cape Town has the highest temperature: 10°C, Helsinki -2°C, Chicago 2°C."),
    ]
    assert not any(FAMILY.check_answer(inst, a) for inst, a in bad)
    assert all(FAMILY.check_answer(inst, a) for inst, a in good)


@pytest.mark.parametrize("level", [2, 3])
def test_evidence_style_reference_lists_then_concludes(level):
    env = envs.make("weather", answer_style="evidence", fault_rate=0.3)
    for seed in range(20):
        messages, info = run_reference_episode(env, seed=seed, level=level)
        answer, target = messages[-1]["content"], env.instance.data["target"]
        assert info["success"], (seed, answer)
        assert answer.endswith(
            f": {target} is {'warmer' if level == 2 else 'the '}"
            + ("" if level == 2 else env.instance.data["superlative"])
            + "."
        )
        assert mentioned_numbers(answer) == [
            env.instance.data["world"][c]["temperature_c"] for c in env.instance.data["cities"]
        ]
    with pytest.raises(ValueError, match="answer_style must be one of"):
        WeatherFamily(answer_style="verbose")


def test_helpers():
    assert mentioned_numbers("−5°C, 21.5 and 3") == [-5.0, 21.5, 3.0]
    assert first_mentioned("in rio de janeiro, unlike Paris", ["Paris", "Rio de Janeiro"]) == (
        "Rio de Janeiro"
    )
    assert first_mentioned("Parisian weather", ["Paris"]) is None


def test_tools_unknown_city_and_case_insensitive_lookup():
    env = envs.make("weather", fault_rate=0.0)
    env.reset(seed=0, options={"instance": instance(1, {"Paris": 21}, "Paris")})
    _, _, _, _, info = env.step(
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Atlantis"}}</tool_call>'
    )
    assert info["tool_calls"][0]["error_code"] == "exception"
    assert "Atlantis" in json.loads(info["tool_calls"][0]["content"])["message"]
    _, _, _, _, info = env.step(
        '<tool_call>{"name": "get_weather", "arguments": {"city": " paris"}}</tool_call>'
    )
    assert json.loads(info["tool_calls"][0]["content"]) == {
        "city": "Paris",
        "temperature_c": 21,
        "condition": "sunny",
    }


def test_faults_are_transient_and_seeded():
    inst = instance(1, {"Paris": 21}, "Paris")
    tools = {t.name: t for t in WeatherFamily(fault_rate=1.0).tools(inst)}
    results = [tools["get_weather"](city="Paris") for _ in range(3)]
    assert (
        results[0]
        == results[1]
        == {"error": "unavailable", "message": "Weather service busy, try again."}
    )
    assert results[2]["temperature_c"] == 21  # at most 2 faults per episode
    env = envs.make("weather", fault_rate=0.5)
    runs = [run_reference_episode(env, seed=11, level=3)[0] for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_reference_solver_always_succeeds_with_faults(level):
    env = envs.make("weather", fault_rate=0.3)
    faults = 0
    for seed in range(50):
        messages, info = run_reference_episode(env, seed=seed, level=level)
        assert info["success"], (seed, messages[-3:])
        assert info["reward"].layers["repeat"] == 0.0
        faults += sum('"unavailable"' in m["content"] for m in messages if m["role"] == "tool")
    assert faults > 0  # retries were exercised


def _answer_after_lookups(progress_reward: bool, lookups: int, fault_rate: float = 0.0):
    env = envs.make("weather", progress_reward=progress_reward, fault_rate=fault_rate)
    env.reset(seed=3, options={"level": 3})
    for call in env.instance.expected_calls[:lookups]:
        env.step(format_call(call))
    return env.step("It is warm everywhere.")[4]["reward"]


def test_progress_reward_pays_for_every_asked_city_looked_up():
    plain = [_answer_after_lookups(False, n) for n in (1, 3)]
    shaped = [_answer_after_lookups(True, n) for n in (1, 3)]
    assert all("progress" not in r.layers for r in plain)  # off by default: the reward as before
    assert [r.layers["progress"] for r in shaped] == pytest.approx([1 / 3, 1.0])
    assert [s.total - p.total for s, p in zip(shaped, plain, strict=True)] == pytest.approx(
        [0.3 / 3, 0.3]
    )
    # a fault is not a lookup: with every call failing, nothing was fetched
    faulted = _answer_after_lookups(True, 1, fault_rate=1.0)
    assert faulted.layers["progress"] == 0.0


def test_progress_reward_keeps_the_reference_solver():
    """The demonstrations do not change with the process layers on."""
    runs = [run_reference_episode(envs.make("weather", progress_reward=p), seed=5, level=3)
            for p in (False, True)]  # fmt: skip
    (plain, plain_info), (shaped, shaped_info) = runs
    assert plain == shaped and len(plain) > 4
    assert plain_info["success"] and shaped_info["reward"].layers["progress"] == 1.0
