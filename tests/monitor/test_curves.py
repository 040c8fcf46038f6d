"""Learning curves: the join with training seconds, first-reaching, ratios, table and plot."""

import json

import pytest

from agentrl.monitor.curves import (
    cost_ratio,
    first_reaching,
    format_curve,
    load_curve,
    plot_curves,
    shared_target,
    train_seconds_by_step,
)


def _point(step, episodes, success, train_s=None):
    return {"step": step, "episodes": episodes, "success_rate": success,
            "success_by_level": {"1": success}, "train_s": train_s}  # fmt: skip


def _write_run(run, points, step_seconds):
    run.mkdir()
    (run / "eval.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
    (run / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": i, "time/step_s": s}) + "\n" for i, s in enumerate(step_seconds)
        )
    )


def test_train_seconds_are_summed_per_completed_step():
    metrics = [{"step": 1, "time/step_s": 2.5}, {"step": 0, "time/step_s": 1.0}]
    assert train_seconds_by_step(metrics) == {0: 0.0, 1: 1.0, 2: 3.5}


def test_load_curve_joins_eval_points_with_training_seconds(tmp_path):
    run = tmp_path / "run"
    points = [_point(0, 0, 0.1), _point(2, 16, 0.4), _point(3, 24, 0.5)]
    _write_run(run, [{k: v for k, v in p.items() if k != "train_s"} for p in points], [4, 6, 5])
    curve = load_curve(run)
    assert [p["train_s"] for p in curve] == [0.0, 10.0, 15.0]
    assert [p["success_rate"] for p in curve] == [0.1, 0.4, 0.5]


def test_load_curve_without_eval_log_says_what_to_set(tmp_path):
    with pytest.raises(FileNotFoundError, match="train.eval_every"):
        load_curve(tmp_path)


def test_first_reaching_shared_target_and_ratio():
    slow = [_point(0, 0, 0.1, 0.0), _point(5, 320, 0.2, 50.0), _point(10, 640, 0.45, 90.0)]
    fast = [_point(0, 0, 0.1, 0.0), _point(5, 320, 0.5, 80.0), _point(10, 640, 0.6, 170.0)]
    assert shared_target([slow, fast]) == 0.45
    assert first_reaching(slow, 0.45) == 640 and first_reaching(fast, 0.45) == 320
    assert first_reaching(fast, 0.45, x="train_s") == 80.0
    assert first_reaching(slow, 0.9) is None
    assert cost_ratio(slow, fast, 0.45) == 2.0
    assert cost_ratio(slow, fast, 0.45, x="train_s") == 90.0 / 80.0
    assert cost_ratio(slow, fast, 0.9) is None
    assert cost_ratio(slow, fast, 0.05) is None  # both there at the start: no ratio


def test_format_and_plot(tmp_path):
    curve = [_point(0, 0, 0.094, 0.0), _point(30, 1920, 0.271, 325.0)]
    table = format_curve("grpo", curve)
    assert "grpo" in table and "0.271" in table and "1920" in table and "L1=0.27" in table
    out = plot_curves({"grpo": curve, "ppo": curve}, tmp_path / "c.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
