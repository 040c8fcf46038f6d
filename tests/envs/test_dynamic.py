"""Dynamic tools: registration and removal while episodes run; held-out tools."""

from __future__ import annotations

import random

import pytest

import agentrl.envs as envs
from agentrl.envs import check_env, run_reference_episode
from agentrl.envs.tasks.dynamic import ALL_SPECS, ToolPool


def test_splits_are_disjoint_and_heldout_is_never_offered_in_training():
    train, held = ToolPool("train"), ToolPool("heldout")
    assert not set(train.names) & set(held.names) and len(held.names) >= 20
    env = envs.make("dynamic")
    offered = set()
    for seed in range(40):
        env.reset(seed=seed, options={"level": 3})
        offered |= {s["function"]["name"] for s in env.tool_schemas}
    assert offered <= set(train.names) and not offered & set(held.names)
    assert check_env(envs.make("dynamic", split="heldout"), seeds=range(6))["success_rate"] == 1.0


def test_registration_mid_run():
    pool = ToolPool("train", active=ToolPool("train").names[:10])
    env = envs.make("dynamic", pool=pool)
    new = ToolPool("train").names[-1]
    before = set()
    for seed in range(30):
        env.reset(seed=seed, options={"level": 1})
        before |= {s["function"]["name"] for s in env.tool_schemas}
    assert new not in before
    pool.register(new)  # mid-run: the next episodes may need the new tool
    pool.remove(pool.active[0])
    needed, solved = set(), 0
    for seed in range(30):
        msgs, info = run_reference_episode(env, seed=100 + seed, level=1)
        needed.add(env.instance.data["spec"])
        solved += info["success"]
        assert {s["function"]["name"] for s in env.tool_schemas} <= set(pool.active)
    assert new in needed and solved == 30 and pool.version == 2


def test_removed_tool_is_unknown_to_the_next_episode():
    pool = ToolPool("train")
    env = envs.make("dynamic", pool=pool)
    env.reset(seed=0, options={"level": 1})
    name = env.instance.data["spec"]
    pool.remove(name)
    env.reset(seed=0, options={"level": 1})
    assert name not in [s["function"]["name"] for s in env.tool_schemas]
    obs, *_ = env.step(f'<tool_call>\n{{"name": "{name}", "arguments": {{}}}}\n</tool_call>')
    assert "unknown_tool" in obs[0]["content"]


def test_rotate_and_state_dict_roundtrip():
    pool = ToolPool("train", active=ToolPool("train").names[:12])
    out, new = pool.rotate(random.Random(0), k=3)
    assert len(out) == len(new) == 3 and not set(new) & set(out)
    copy = ToolPool("train")
    copy.load_state_dict(pool.state_dict())
    assert copy.active == pool.active and copy.version == pool.version
    with pytest.raises(ValueError, match="not a 'train' tool"):
        pool.register(ToolPool("heldout").names[0])


def test_verifier_on_scripted_answers():
    env = envs.make("dynamic")
    msgs, info = run_reference_episode(env, seed=7, level=3)
    inst, fam = env.instance, env.family
    assert info["success"]
    values = fam._values(inst)
    a, b = inst.data["entities"]
    best, worst = (a, b) if values[0] > values[1] else (b, a)
    hi, lo = max(values), min(values)
    assert fam.check_answer(inst, f"{best} is higher: {hi}, {worst}: {lo}")
    assert fam.check_answer(inst, f"{best} has the greater value ({hi} vs {lo} for {worst}).")
    assert not fam.check_answer(inst, f"{worst} is higher: {lo}, {best}: {hi}")
    # a list (or the tool results echoed back) with the higher one first claims nothing
    assert not fam.check_answer(inst, f"{best}: {hi}, {worst}: {lo}")
    assert not fam.check_answer(inst, f"It is {hi} vs {lo} ({worst}).")
    assert not fam.check_answer(inst, f"{best}: {hi}")
    assert all(ALL_SPECS[n]["split"] == "train" for n in inst.data["offered"])


def test_evidence_first_answers_are_judged_by_their_conclusion():
    env = envs.make("dynamic", answer_style="evidence")
    for seed in range(12):
        msgs, info = run_reference_episode(env, seed=seed, level=3)
        inst, fam = env.instance, env.family
        values = fam._values(inst)
        a, b = inst.data["entities"]
        best, worst = (a, b) if values[0] > values[1] else (b, a)
        answer = msgs[-1]["content"]
        assert info["success"], (seed, answer)
        assert answer.startswith(f"{a} {values[0]} ") and answer.endswith(f": {best} is higher.")
        listed = f"{a} {values[0]}, {b} {values[1]}"
        assert fam.check_answer(inst, f"{listed}, so {best} is higher than {worst}.")
        assert fam.check_answer(inst, f"{b} {values[1]}, {a} {values[0]}: {best} is higher.")
        # names and numbers are placed in the same text ("ß".upper() is two letters)
        assert fam.check_answer(inst, "Große Straße, " * 4 + f"{listed}: {best.lower()} is higher.")
        assert not fam.check_answer(inst, f"{listed}: {worst} is higher.")
        assert not fam.check_answer(inst, f"{listed}: {worst} is higher than {best}.")
        assert not fam.check_answer(inst, f"{a} {values[1]}, {b} {values[0]}: {best} is higher.")
        assert not fam.check_answer(inst, f"{listed}: {best}.")  # no comparison made
    with pytest.raises(ValueError, match="answer_style must be one of"):
        envs.make("dynamic", answer_style="verbose")


def test_a_call_naming_the_latest_year_reads_the_default_record():
    """No year means the latest: the record says 2024 and holds 2024's value, not another."""
    env = envs.make("dynamic")
    env.reset(seed=3, options={"level": 1})
    spec = ALL_SPECS[env.instance.data["spec"]]
    entity = env.instance.data["entities"][0]
    tool = {t.name: t for t in env.family.tools(env.instance)}[spec["name"]]
    id_arg = f"{spec['kind']}_id"
    default = tool.fn(**{id_arg: entity})
    latest = tool.fn(**{id_arg: entity, "year": 2024})
    earlier = tool.fn(**{id_arg: entity, "year": 2020})
    assert default == latest and default["year"] == 2024
    assert earlier[spec["quantity"]] != default[spec["quantity"]]
    answer = f"It is {latest[spec['quantity']]} {spec['unit']}."
    assert env.family.check_answer(env.instance, answer)
    assert not env.family.check_answer(env.instance, f"It is {earlier[spec['quantity']]}.")
