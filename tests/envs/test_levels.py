"""Levels are checked once, in ``ToolTaskEnv.reset`` (families' ``sample`` trusts them)."""

from __future__ import annotations

import pytest

import agentrl.envs as envs
from agentrl.envs.tasks.arith import ArithFamily

IDS = ["weather", "meeting", "shop", "library", "dynamic"]


def built(env_id: str):
    if env_id == "arith_code":
        return envs.ToolTaskEnv(ArithFamily(sandbox_mode="unsafe"), max_turns=4)
    return envs.make(env_id)


@pytest.mark.parametrize("env_id", [*IDS, "arith_code"])
def test_a_bad_level_is_the_same_clear_error_for_every_family(env_id):
    env = built(env_id)
    levels = list(env.family.levels)
    listed = ", ".join(map(str, levels))
    want = rf"^level 9 is not one of '{env.family.name}''s levels \[{listed}\]$"
    with pytest.raises(ValueError, match=want):
        env.reset(seed=0, options={"level": 9})
    with pytest.raises(ValueError, match=r"level '1' is not one of"):
        env.reset(seed=0, options={"level": "1"})
    _, info = env.reset(seed=0, options={"level": levels[-1]})
    assert info["level"] == levels[-1]


def test_dynamic_reset_draws_like_the_generic_env():
    env = envs.make("dynamic")
    _, first = env.reset(seed=5, options={"level": 2})
    offered = sorted(s["function"]["name"] for s in env.tool_schemas)
    assert offered == env.instance.data["offered"] and len(offered) == 5
    with pytest.raises(ValueError, match=r"unknown reset option\(s\) \['levl'\]"):
        env.reset(seed=5, options={"levl": 2})
    again, second = env.reset(seed=5, options={"level": 2})
    assert first == second and again[-1]["content"] == env.instance.prompt
    assert envs.check_env(env, seeds=(0, 1))["success_rate"] == 1.0
