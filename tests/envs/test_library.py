"""The open tool library: every tool offered, each task needing a subset."""

from __future__ import annotations

import agentrl.envs as envs
from agentrl.envs import check_env


def test_library_offers_all_tools_and_reference_solves():
    env = envs.make("library")
    names = {s["function"]["name"] for s in env.tool_schemas}
    assert {"get_weather", "convert_time", "checkout", "draft_email"} <= names
    families = set()
    for seed in range(12):
        env.reset(seed=seed, options={"level": 2})
        families.add(env.instance.data["family"])
        needed = {c.name for c in env.instance.expected_calls}
        assert needed < names
    assert len(families) >= 3
    assert check_env(env, seeds=range(4))["success_rate"] == 1.0


def test_library_without_math_says_so(monkeypatch):
    import sys
    import warnings

    from agentrl.envs.tasks.library import default_families

    monkeypatch.setitem(sys.modules, "agentrl.envs.tasks.mathgym", None)  # import fails
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = [f.name for f in default_families()]
    assert "math" not in names and len(names) == 3
    assert any("library tasks without math" in str(w.message) for w in caught)


def _names(schemas):
    return [s["function"]["name"] for s in schemas]


def test_shuffle_tools_orders_the_list_by_episode_seed():
    plain, shuffled = envs.make("library"), envs.make("library", shuffle_tools=True)
    orders = set()
    for seed in range(6):
        plain.reset(seed=seed, options={"level": 2})
        shuffled.reset(seed=seed, options={"level": 2})
        assert sorted(_names(shuffled.tool_schemas)) == sorted(_names(plain.tool_schemas))
        orders.add(tuple(_names(shuffled.tool_schemas)))
        again = envs.make("library", shuffle_tools=True)
        again.reset(seed=seed, options={"level": 2})
        assert again.tool_schemas == shuffled.tool_schemas  # the seed alone sets the order
    assert len(orders) == 6 and tuple(_names(plain.tool_schemas)) not in orders
    snap = shuffled.snapshot()
    branch = envs.make("library", shuffle_tools=True)
    branch.restore(snap)
    assert branch.tool_schemas == shuffled.tool_schemas
    report = check_env(envs.make("library", shuffle_tools=True), seeds=range(4))
    assert report["success_rate"] == 1.0


def test_the_rollout_renders_each_episode_s_own_tool_order(tiny_policy):
    from agentrl.chat.render import stop_token_ids, tokenize
    from agentrl.policy.generate import Sample
    from agentrl.rollout import EpisodeSpec, run_episodes

    _, tok = tiny_policy
    stop = stop_token_ids(tok)[0]
    seen: list[str] = []

    class Answerer:
        tokenizer = tok

        def generate(self, prompts, *, max_new_tokens, **kwargs):
            seen.extend(tok.decode(p) for p in prompts)
            ids = tokenize(tok, "I cannot tell.") + [stop]
            return [Sample(ids, [-0.5] * len(ids), True) for _ in prompts]

    make_env = lambda: envs.make("library", shuffle_tools=True)  # noqa: E731
    specs = [EpisodeSpec(seed=s, level=1) for s in (1, 2)]
    run_episodes(Answerer(), make_env, specs, max_total_tokens=4096)
    for spec, prompt in zip(specs, seen, strict=True):
        env = make_env()
        env.reset(seed=spec.seed, options={"level": 1})
        where = [prompt.index(f'"name": "{n}"') for n in _names(env.tool_schemas)]
        assert where == sorted(where)  # the prompt lists the tools in the episode's order


def test_first_call_is_scored_by_family_for_library_episodes():
    """Which family's requests send the model to the wrong tool: episodes that open with the
    list's first schema (the warm start's habit) are right only where that is the needed tool."""
    from agentrl.eval.decomposition import call_decomposition
    from agentrl.eval.runner import eval_specs
    from agentrl.types import RewardBreakdown, Trajectory

    make_env = lambda: envs.make("library")  # noqa: E731
    specs = eval_specs(12, [1, 2], 10_000)
    trajs, right = [], {}
    for spec in specs:
        env = make_env()
        env.reset(seed=spec.seed, options={"level": spec.level})
        inst, first_listed = env.instance, env.tool_schemas[0]["function"]["name"]
        family = inst.data["family"]
        call = {"name": first_listed, "arguments": {}}
        trajs.append(Trajectory(inst.task_id, 0, [], [], [], [], [], RewardBreakdown(),
                                "failure", tool_calls=[call]))  # fmt: skip
        right.setdefault(family, []).append(first_listed == inst.expected_calls[0].name)
    got = call_decomposition(trajs, specs, make_env)
    assert len(right) >= 3  # several families among 12 episodes
    assert got["first_tool_by_family"] == {k: sum(v) / len(v) for k, v in sorted(right.items())}
    assert 0.0 in got["first_tool_by_family"].values()  # the first schema is not every need


def _first_of(env, family, level, seeds=range(40)):
    for seed in seeds:
        env.reset(seed=seed, options={"level": level})
        if env.instance.data["family"] == family:
            return seed
    raise AssertionError(f"no {family} task in seeds {seeds}")


def test_family_kwargs_set_a_member_family_s_options():
    from agentrl.envs.reference import run_reference_episode

    options = {"weather": {"answer_style": "evidence"}, "meeting": {"probe_slots": True}}
    env = envs.make("library", family_kwargs=options, max_turns=24)
    plain = envs.make("library", max_turns=24)
    seed = _first_of(env, "weather", 2)
    msgs, info = run_reference_episode(env, seed=seed, level=2)
    answer = msgs[-1]["content"]
    assert info["success"] and answer.index("°C") < answer.index(" is warmer")  # evidence first
    msgs, _ = run_reference_episode(plain, seed=seed, level=2)
    assert " is warmer:" in msgs[-1]["content"]  # the default: the city first
    seed = _first_of(env, "meeting", 2)
    msgs, info = run_reference_episode(env, seed=seed, level=2)
    turns = [m for m in msgs if m["role"] == "assistant"]
    assert info["success"]
    assert turns[0]["content"].startswith("First, everyone's time zone")  # delegated note
    calls = [c["function"]["name"] for t in turns for c in t.get("tool_calls") or []]
    assert "find_conflicts" in calls  # the slot is found by trying
    msgs, _ = run_reference_episode(plain, seed=seed, level=2)
    assert not any(m["content"].startswith("First,") for m in msgs if m["role"] == "assistant")


def test_family_kwargs_errors_name_the_family():
    import pytest

    with pytest.raises(ValueError, match=r"no member family \['wether'\]"):
        envs.make("library", family_kwargs={"wether": {"answer_style": "evidence"}})
    with pytest.raises(ValueError, match=r"family_kwargs\['meeting'\].*probe"):
        envs.make("library", family_kwargs={"meeting": {"probe": True}})
    with pytest.raises(ValueError, match="answer_style"):
        envs.make("library", family_kwargs={"weather": {"answer_style": "loud"}})
