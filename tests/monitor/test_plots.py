"""``agentrl plot``: the training curves and the interaction timeline of a real tiny run, and
the choices behind them (which episodes, which turn each call belongs to)."""

import json

import pytest
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.monitor.metrics import read_jsonl
from agentrl.monitor.plots import call_turns, choose_episodes, metric_series
from agentrl.monitor.rundata import load_run

PNG = b"\x89PNG\r\n\x1a\n"


def test_plot_writes_both_pngs_from_a_real_run(logged_run, tmp_path):
    pytest.importorskip("matplotlib")
    result = CliRunner().invoke(app, ["plot", str(logged_run), "--out", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    for name in ("training.png", "timeline.png"):
        data = (tmp_path / "p" / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 20_000, name  # a real figure, not a blank


def test_metric_series_are_the_logged_values_against_steps_done(logged_run):
    data = load_run(logged_run)
    layers = metric_series(data, r"reward/(?!std$)[a-z_]+$")
    assert "reward/total" in layers and "reward/std" not in layers and "reward/format" in layers
    steps, values = layers["reward/total"]
    assert steps == [1, 2, 3] and values == [m["reward/total"] for m in data.metrics]


def test_the_timeline_puts_each_call_on_its_turn(logged_run):
    episodes = read_jsonl(logged_run / "trajectories.jsonl")
    called = [e for e in episodes if e["tool_calls"]]
    assert called, "the tool-calling generator makes calls"
    for e in called:
        turns = call_turns(e)
        assert turns == [c["turn"] for c in e["tool_calls"]]
        assert all(0 <= t < len(e["reward"]["per_turn"]) for t in turns)
        legacy = {**e, "tool_calls": [{k: v for k, v in c.items() if k != "turn"}
                                      for c in e["tool_calls"]]}  # fmt: skip
        assert call_turns(legacy) == turns  # counted from the assistant messages instead


def test_chosen_episodes_are_the_newest_steps_best_worst_and_each_ending():
    def ep(step, total, end):
        return {"step": step, "termination": end, "reward": {"total": total}}

    pool = [ep(2, 0.5, "failure"), ep(2, 1.0, "success"), ep(2, 0.1, "max_turns"),
            ep(2, 0.3, "failure"), ep(2, 0.0, "length"), ep(1, 2.0, "success")]  # fmt: skip
    chosen = choose_episodes(pool, n=4)
    assert [c["reward"]["total"] for c in chosen[:2]] == [1.0, 0.0]  # best, worst of step 2
    assert {c["termination"] for c in chosen} == {"success", "length", "failure", "max_turns"}
    assert all(c["step"] == 2 for c in chosen) and choose_episodes([], 3) == []


def test_plot_names_a_directory_that_is_not_a_run(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0}) + "\n")
    result = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert result.exit_code == 2 and "not a run directory" in result.output
