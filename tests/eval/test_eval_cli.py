"""``agentrl eval`` with suites, the reference policy and a model; --json last line."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from agentrl.cli import app

runner = CliRunner()


def test_reference_suites_json_and_transcripts(tmp_path):
    result = runner.invoke(app, ["eval", "reference", "--suite", "basic", "--suite", "adversarial",
                                 "--episodes", "2", "--out", str(tmp_path), "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["success_rate"] == 1.0
    assert report["suites"]["basic"]["tasks"]["meeting"]["success_rate"] == 1.0
    assert set(report["suites"]) == {"basic", "adversarial"}
    lines = (tmp_path / "transcripts" / "adversarial.jsonl").read_text().splitlines()
    assert len(lines) == report["suites"]["adversarial"]["episodes"]
    assert json.loads((tmp_path / "report.json").read_text()) == report


def test_unknown_suite_is_named():
    result = runner.invoke(app, ["eval", "reference", "--suite", "easy"])
    assert result.exit_code == 2 and "easy" in result.output and "basic" in result.output


def test_reference_on_one_task_keeps_the_old_report_keys():
    result = runner.invoke(app, ["eval", "reference", "--task", "meeting", "--episodes", "3",
                                 "--levels", "0,1,2", "--json"])  # fmt: skip
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["success_rate"] == 1.0 and set(report["success_by_level"]) == {"0", "1", "2"}


def test_tiny_model_on_a_suite(tiny_dir, tmp_path):
    result = runner.invoke(app, ["eval", str(tiny_dir), "--suite", "basic", "--episodes", "1",
                                 "--json", "--out", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    tasks = report["suites"]["basic"]["tasks"]
    assert set(tasks) >= {"weather", "meeting", "shop"} and report["episodes"] == len(tasks)
    rec = json.loads((tmp_path / "transcripts" / "basic.jsonl").read_text().splitlines()[0])
    assert rec["num_policy_tokens"] > 0 and rec["suite"] == "basic"
