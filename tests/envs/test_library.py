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
