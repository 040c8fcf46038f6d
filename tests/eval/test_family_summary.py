"""Held-out summaries of a mix of task families (the library, a staged curriculum): success per
family beside success per level, in the summary, the curve point, the sink metrics and the
printed line; a one-family run's summary stays as it was."""

from __future__ import annotations

import agentrl.envs as envs
from agentrl.eval.runner import family_line, success_line, summarize
from agentrl.eval.task_ids import task_family
from agentrl.train.run import curve_point, eval_metrics
from agentrl.types import RewardBreakdown, Trajectory


def _episode(task_id: str, level: int, success: bool) -> Trajectory:
    return Trajectory(task_id, 0, [], [], [], [], [], RewardBreakdown(),
                      "success" if success else "failure", level)  # fmt: skip


def test_task_family_reads_plain_and_library_ids():
    assert task_family("weather-L2-0a1b2c3d") == "weather"
    assert task_family("meeting_duo-L1-00000000") == "meeting_duo"
    assert task_family("library-shop-L3-deadbeef") == "shop"
    env = envs.make("library")
    for seed in range(8):
        env.reset(seed=seed, options={"level": 1})
        assert task_family(env.instance.task_id) == env.instance.data["family"]


def test_library_summary_splits_success_by_family():
    env = envs.make("library")
    trajs = []
    for seed in range(24):  # the library's own task ids; weather episodes fail, others succeed
        level = 1 + seed % 3
        env.reset(seed=seed, options={"level": level})
        family = env.instance.data["family"]
        trajs.append(_episode(env.instance.task_id, level, family != "weather"))
    families = {task_family(t.task_id) for t in trajs}
    assert "weather" in families and len(families) >= 3
    summary = summarize(trajs)
    by_family = summary["success_by_family"]
    assert set(by_family) == families
    assert by_family["weather"] == 0.0
    assert all(rate == 1.0 for name, rate in by_family.items() if name != "weather")
    n_weather = sum(task_family(t.task_id) == "weather" for t in trajs)
    assert summary["success_rate"] == (24 - n_weather) / 24
    point = curve_point(3, 96, summary)
    assert point["success_by_family"] == by_family
    assert eval_metrics(point)["eval/success/weather"] == 0.0
    assert "by family: {" in success_line(summary) and "'weather': 0.0" in success_line(summary)
    assert family_line({"success_by_family": {"math": 12 / 26}}) == "by family: {'math': 0.462}"


def test_one_family_summary_has_no_family_split():
    trajs = [_episode("weather-L1-00000001", 1, True), _episode("weather-L2-00000002", 2, False)]
    summary = summarize(trajs)
    assert "success_by_family" not in summary
    # a plugin family's ids of its own shape (one per instance) are not families
    assert task_family("ticket-8f2a") is None
    assert "success_by_family" not in summarize([_episode("ticket-8f2a", 1, True),
                                                 _episode("ticket-91c0", 1, False)])  # fmt: skip
    assert summary["success_by_level"] == {"1": 1.0, "2": 0.0}
    assert "by family" not in success_line(summary) and family_line(summary) == ""
