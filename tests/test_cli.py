"""The CLI's error paths name the bad input; --json prints one JSON object last."""

import json

from typer.testing import CliRunner

from agentrl.cli import app

runner = CliRunner()


def test_train_bad_field_is_named(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("algo:\n  learning_rate: 1\n")
    result = runner.invoke(app, ["train", str(cfg)])
    assert result.exit_code == 2
    assert "algo.learning_rate" in result.output and "kl_coef" in result.output


def test_eval_missing_path_is_named():
    result = runner.invoke(app, ["eval", "/no/such/run"])
    assert result.exit_code == 2
    assert "/no/such/run" in result.output and "does not exist" in result.output


def test_eval_json_last_line(tiny_dir):
    result = runner.invoke(app, ["eval", str(tiny_dir), "--episodes", "3", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["episodes"] == 3 and 0.0 <= report["success_rate"] <= 1.0
    assert set(report["success_by_level"]) == {"1", "2", "3"}
