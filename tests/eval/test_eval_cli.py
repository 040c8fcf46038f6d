"""``agentrl eval`` with suites, the reference policy and a model; --json last line."""

from __future__ import annotations

import json
import sys

import pytest
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


@pytest.fixture
def no_reasoning_gym(monkeypatch):
    """As if the `tasks` extra were not installed: reasoning-gym cannot be imported."""
    from agentrl.envs.tasks import mathgym

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # `import reasoning_gym` fails
    monkeypatch.setattr(mathgym, "reasoning_gym", None)  # as mathgym sees it then


def _one_error_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: ")
    return lines[0]


def test_a_missing_extra_is_one_line_naming_the_install(no_reasoning_gym):
    result = runner.invoke(app, ["eval", "reference", "--task", "math", "--episodes", "1"])
    line = _one_error_line(result)
    assert "reasoning-gym" in line and "pip install 'agentrl[tasks]'" in line  # not eaten as markup


def test_a_missing_extra_with_a_model_policy(no_reasoning_gym, tiny_dir):
    result = runner.invoke(app, ["eval", str(tiny_dir), "--task", "math", "--episodes", "1"])
    assert "pip install 'agentrl[tasks]'" in _one_error_line(result)


@pytest.mark.parametrize(
    "extra",
    [["--task", "math"], ["--levels", "2"], ["--import", "os"], ["--task", "weather"],
     ["--env", "split=heldout"], ["--max-turns", "3"], ["--max-total-tokens", "2048"]],
)  # fmt: skip
def test_a_suite_refuses_options_it_would_ignore(extra):
    result = runner.invoke(app, ["eval", "reference", "--suite", "basic", *extra])
    line = _one_error_line(result)
    assert f"{extra[0]} cannot be combined with --suite" in line


def test_a_suite_reports_the_family_it_cannot_run(no_reasoning_gym):
    args = ["eval", "reference", "--suite", "basic", "--suite", "hard", "--episodes", "1", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for name in ("basic", "hard"):
        suite = report["suites"][name]
        assert "math" not in suite["tasks"] and list(suite["skipped"]) == ["math"]
        assert "pip install" in suite["skipped"]["math"]
        assert f"{name}: SKIPPED math: the math task needs reasoning-gym" in result.output
    assert report["suites"]["basic"]["episodes"] == 4  # weather, meeting, shop, dynamic


def test_a_suite_runs_math_when_the_extra_is_there():
    pytest.importorskip("reasoning_gym")
    result = runner.invoke(
        app, ["eval", "reference", "--suite", "basic", "--episodes", "1", "--json"]
    )
    basic = json.loads(result.stdout.strip().splitlines()[-1])["suites"]["basic"]
    assert basic["skipped"] == {} and basic["tasks"]["math"]["success_rate"] == 1.0
    assert "SKIPPED" not in result.output


def test_env_options_reach_the_task(tmp_path):
    from agentrl.envs import make

    heldout = make("dynamic", split="heldout")
    heldout.reset(seed=10_000)
    result = runner.invoke(app, ["eval", "reference", "--task", "dynamic", "--env", "split=heldout",
                                 "--episodes", "2", "--levels", "1", "--out", str(tmp_path),
                                 "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    rec = json.loads((tmp_path / "transcripts.jsonl").read_text().splitlines()[0])
    offered = {s["function"]["name"] for s in heldout.tool_schemas}
    assert rec["tool_calls"][0]["name"] in offered  # a held-out tool, never offered in training


@pytest.mark.parametrize(
    "opt, named", [("bogus=1", "bogus"), ("novalue", "KEY=VALUE"), ("split=[", "split")]
)
def test_a_bad_env_option_is_named(opt, named):
    result = runner.invoke(app, ["eval", "reference", "--task", "dynamic", "--env", opt])
    assert result.exit_code == 2 and named in result.output


def test_a_run_directory_is_evaluated_on_its_own_task(tiny_dir, tmp_path):
    from agentrl.config import build_config, save_config
    from agentrl.eval.api import run_eval

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    for f in tiny_dir.iterdir():
        (run / "model" / f.name).write_bytes(f.read_bytes())
    cfg = build_config(overrides=["task.env=meeting", "task.levels=[0]", "task.max_turns=3",
                                  "rollout.max_total_tokens=2048"])  # fmt: skip
    save_config(cfg, run / "config.yaml")
    report, records = run_eval(str(run), episodes=1)
    assert report["task"] == "meeting" and set(report["success_by_level"]) == {"0"}
    assert all(sum(m["role"] == "assistant" for m in r["messages"]) <= 3 for r in records)
    assert max(r["num_tokens"] for r in records) > 1024  # the run's budget, not eval's default
    report, _ = run_eval(str(run), task="weather", episodes=1)  # another task: its own defaults
    assert report["task"] == "weather" and set(report["success_by_level"]) == {"1"}


def test_start_weights_are_the_run_start_checkpoint(tiny_dir, tmp_path):
    import torch

    from agentrl.eval.weights import load_start_weights
    from agentrl.policy.loading import load_policy

    model, _ = load_policy(str(tiny_dir))
    start = {k: v + 1.0 if v.is_floating_point() else v for k, v in model.state_dict().items()}
    (tmp_path / "checkpoints").mkdir()
    torch.save(start, tmp_path / "checkpoints" / "rl_start.pt")
    load_start_weights(model, tmp_path, "cpu")
    name, tensor = next(iter(start.items()))
    assert torch.equal(model.state_dict()[name], tensor)
    bad = {k: v for k, v in list(start.items())[1:]}  # a missing key: refused, named
    torch.save(bad, tmp_path / "checkpoints" / "rl_start.pt")
    with pytest.raises(ValueError, match="does not fit"):
        load_start_weights(model, tmp_path, "cpu")


def test_start_weights_of_a_run_stopped_before_its_model_was_saved(tiny_dir, tmp_path):
    """A run stopped during its evaluation before RL has config.yaml and rl_start.pt but no
    model/: its start weights load onto the base model that config.yaml names."""
    import torch

    from agentrl.eval.weights import load_eval_engine
    from agentrl.export import export_model
    from agentrl.policy.loading import load_policy

    run = tmp_path / "stopped"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(f"model:\n  name: {tiny_dir}\ntask:\n  env: weather\n")
    model, _ = load_policy(str(tiny_dir))
    start = {k: v.clone() for k, v in model.state_dict().items()}
    start["model.norm.weight"] = start["model.norm.weight"] * 0.5  # not the base's
    torch.save(start, run / "checkpoints" / "rl_start.pt")
    engine = load_eval_engine(str(run), "cpu", "start")
    assert torch.equal(engine.model.state_dict()["model.norm.weight"], start["model.norm.weight"])
    export_model(str(run), tmp_path / "exported", weights="start")
    exported, _ = load_policy(str(tmp_path / "exported"))
    assert torch.equal(exported.state_dict()["model.norm.weight"], start["model.norm.weight"])
    result = runner.invoke(app, ["eval", str(run), "--episodes", "1"])  # final: there is none
    assert result.exit_code == 2 and "with model/" in result.output
    assert "--weights start" in result.output  # and what it can do instead


def test_start_weights_without_a_run_start_is_named(tiny_dir):
    result = runner.invoke(app, ["eval", str(tiny_dir), "--weights", "start", "--episodes", "1"])
    assert result.exit_code == 2 and "rl_start.pt" in result.output
    result = runner.invoke(app, ["eval", "reference", "--weights", "start", "--episodes", "1"])
    assert result.exit_code == 2 and "run directory" in result.output
    for policy, named in ((str(tiny_dir), "rl_start.pt"), ("reference", "run directory")):
        result = runner.invoke(app, ["eval", policy, "--weights", "start", "--suite", "basic"])
        assert result.exit_code == 2 and named in result.output  # suites load the start too


def test_a_model_report_says_whether_the_first_call_names_the_needed_tool(tiny_dir, tmp_path):
    """The figure is recomputed here from the transcripts: each episode's first call against
    the reference solver's first call on the same instance (drawn again from seed and level)."""
    from agentrl.envs import make

    result = runner.invoke(app, ["eval", str(tiny_dir), "--task", "dynamic", "--episodes", "2",
                                 "--levels", "1,3", "--out", str(tmp_path), "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "evaluating: 2/2 episodes" in result.stderr  # a progress line, off stdout's JSON
    report = json.loads(result.stdout.strip().splitlines()[-1])
    records = [json.loads(x) for x in (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    right: dict[str, list[bool]] = {"1": [], "3": []}
    for rec in records:
        env = make("dynamic")
        env.reset(seed=rec["info"]["seed"], options={"level": rec["level"]})
        first = rec["tool_calls"][0]["name"] if rec["tool_calls"] else None
        right[str(rec["level"])].append(first == env.instance.expected_calls[0].name)
    assert report["first_tool_by_level"] == {k: sum(v) / len(v) for k, v in right.items()}
    assert report["first_tool_rate"] == sum(right["1"] + right["3"]) / 2
    assert "first call names the needed tool, by level: {'1': " in result.output
