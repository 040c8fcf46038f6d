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
