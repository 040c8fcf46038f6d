"""``agentrl doctor``'s checks on hand-made run data (each table row fires on its signature and
stays quiet on a healthy window), and the command on real tiny runs: finished, crashed, out of
memory, killed, still running."""

import json
import os
import subprocess
import sys

import pytest
from runhelpers import tiny_run_overrides
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.config import build_config
from agentrl.monitor import doctor, episode_checks
from agentrl.monitor.rundata import RunData, load_run
from agentrl.monitor.status import read_status, write_status
from agentrl.train import train


def _data(metrics=(), episodes=(), config=None, evals=(), summary=None, status=None):
    steps = [{"step": i, **m} for i, m in enumerate(metrics)]
    return RunData(None, config or {}, steps, list(evals), list(episodes), [], summary, status)


def _codes(data):
    return [f.code for f in doctor.diagnose(data)]


def _episode(calls=(), termination="success", turns=None, parse_errors=()):
    return {"task_id": "t", "step": 1, "termination": termination, "tool_calls": list(calls),
            "reward": {"per_turn": turns or []},
            "info": {"parse_errors": list(parse_errors)}}  # fmt: skip


HEALTHY = [{"reward/total": 0.2 + 0.05 * i, "reward/completion": 0.1 + 0.05 * i,
            "reward/std": 0.3, "policy/entropy": 1.0 - 0.02 * i, "loss/kl": 0.01,
            "train/kl_coef": 0.05, "rollout/success_rate": 0.1 + 0.05 * i,
            "reward/format": 0.9} for i in range(12)]  # fmt: skip


def test_a_healthy_window_has_no_finding():
    eps = [_episode([{"name": "get_weather", "arguments": {"city": "Paris"}, "ok": True}])] * 10
    assert _codes(_data(HEALTHY, eps)) == []


def test_kl_explosion_from_the_kl_series():
    metrics = [{**m, "loss/kl": 0.01 * 3**i} for i, m in enumerate(HEALTHY)]
    (finding,) = [f for f in doctor.diagnose(_data(metrics)) if f.code == "kl_explosion"]
    assert finding.severity == "error" and finding.evidence["metric"] == "loss/kl"
    assert finding.fix == ["algo.kl.coef=0.25", "algo.lr=0.0001"]  # defaults 0.05 and 3e-4


def test_kl_unconstrained_needs_twenty_steps_at_zero():
    zero = [{**m, "train/kl_coef": 0.0} for m in HEALTHY * 2]
    assert "kl_unconstrained" in _codes(_data(zero))
    assert "kl_unconstrained" not in _codes(_data(zero[:19]))


def test_entropy_spike_and_premature_convergence():
    spike = [{**m, "policy/entropy": 4.0 if i == 8 else 1.0} for i, m in enumerate(HEALTHY)]
    assert "entropy_spike" in _codes(_data(spike))
    collapse = [{**m, "policy/entropy": 2.0 * 0.7**i, "rollout/success_rate": 0.1}
                for i, m in enumerate(HEALTHY)]  # fmt: skip
    assert "premature_convergence" in _codes(_data(collapse))
    solved = [{**m, "rollout/success_rate": 0.9} for m in collapse]  # converged on success
    assert "premature_convergence" not in _codes(_data(solved))


def test_reward_flat_says_when_there_is_no_signal_at_all():
    flat = [{**m, "reward/total": 0.0, "reward/std": 0.0, "reward/completion": 0.0}
            for m in HEALTHY]  # fmt: skip
    (finding,) = [f for f in doctor.diagnose(_data(flat)) if f.code == "reward_flat"]
    assert "no signal" in finding.title and finding.evidence["reward_std_max"] == 0.0


def test_reward_oscillating_is_a_swing_without_a_trend():
    swing = [{**m, "reward/total": 0.2 + (0.4 if i % 2 else 0.0)} for i, m in enumerate(HEALTHY)]
    (finding,) = [f for f in doctor.diagnose(_data(swing)) if f.code == "reward_oscillating"]
    assert finding.fix[0] == "rollout.group_size=16"  # twice the default group


def test_reward_hacking_from_the_config_and_from_the_layers():
    config = {"reward": {"completion": 0.0, "format": 1.0}}
    (finding,) = [f for f in doctor.diagnose(_data(config=config)) if f.code == "reward_hacking"]
    assert finding.severity == "error" and "reward.completion=1.0" in finding.fix
    form_only = [{**m, "reward/completion": 0.1} for m in HEALTHY]  # total rises, task does not
    assert "reward_hacking" in _codes(_data(form_only))
    assert "reward_hacking" not in _codes(_data(HEALTHY))


def test_general_drop_points_at_the_best_evaluation():
    evals = [{"step": 0, "success_rate": 0.2}, {"step": 10, "success_rate": 0.6},
             {"step": 20, "success_rate": 0.5}]  # fmt: skip
    summary = {"general_before": 0.5, "general_after": 0.3, "general_drop": 0.2}
    (finding,) = [f for f in doctor.diagnose(_data(HEALTHY, evals=evals, summary=summary))
                  if f.code == "general_drop"]  # fmt: skip
    assert finding.fix == ["algo.kl.coef=0.1", "train.steps=10"]
    assert "general_drop" not in _codes(_data(HEALTHY, summary={**summary, "general_drop": 0.05}))


def test_format_errors_name_the_first_bad_turn():
    bad = _episode(turns=[{"format": 1.0}, {"format": 0.0}], parse_errors=["bad_json"])
    (finding,) = [f for f in doctor.diagnose(_data(HEALTHY, [bad] * 4 + [_episode()] * 6))
                  if f.code == "format_errors"]  # fmt: skip
    assert finding.evidence["fraction"] == 0.4 and finding.evidence["examples"][0]["turn"] == 1
    low = [{**m, "reward/format": 0.3} for m in HEALTHY]
    (finding,) = [f for f in doctor.diagnose(_data(low, [_episode()] * 10))
                  if f.code == "format_errors"]  # fmt: skip
    assert "0.30" in finding.title  # the format layer's own mean, not "0 of 10"


def test_a_repeat_is_an_identical_call_after_a_success_not_a_retry():
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}, "ok": True}
    retry = [{**call, "ok": False}, call]  # an error, then the same call: a retry
    loop = [call, {"name": "get_weather", "arguments": {"city": "Oslo"}, "ok": True}]
    assert episode_checks.first_repeat(_episode(retry)) is None
    assert episode_checks.first_repeat(_episode(loop)) == 1
    (finding,) = [f for f in doctor.diagnose(_data(HEALTHY, [_episode(loop)] * 4 +
                  [_episode(retry)] * 6)) if f.code == "repeated_calls"]  # fmt: skip
    assert finding.severity == "warning" and finding.evidence["fraction"] == 0.4
    assert finding.evidence["examples"][0]["call"] == 1
    paid = _data(HEALTHY, [_episode(retry)] * 10, config={"reward": {"repeat": 1.0}})
    (finding,) = [f for f in doctor.diagnose(paid) if f.code == "repeated_calls"]
    assert finding.severity == "error" and finding.fix[0] == "reward.repeat=-0.3"


def test_lost_information_and_one_tool():
    calls = [{"name": "search", "arguments": {"q": str(i)}, "ok": True} for i in range(3)]
    cut = [_episode(calls, termination="length")] * 3 + [_episode(calls)] * 7
    config = {"rollout": {"max_total_tokens": 1536}}
    found = {f.code: f for f in doctor.diagnose(_data(HEALTHY, cut, config=config))}
    assert found["lost_information"].fix == ["rollout.max_total_tokens=3072"]
    assert "one_tool" not in found  # the tool-choice layer is not logged: nothing to weigh
    wrong = [{**m, "reward/tool_choice": 0.2} for m in HEALTHY]
    assert "one_tool" in _codes(_data(wrong, cut))


def test_late_task_weakness_from_the_last_evaluation():
    evals = [{"step": 8, "success_rate": 0.5, "success_by_level": {"1": 0.9, "2": 0.5, "3": 0.1}}]
    assert "late_task_weakness" in _codes(_data(HEALTHY, evals=evals))
    even = [{**evals[0], "success_by_level": {"1": 0.9, "2": 0.8, "3": 0.7}}]
    assert "late_task_weakness" not in _codes(_data(HEALTHY, evals=even))


def test_crashed_out_of_memory_and_killed_states():
    crashed = {"state": "crashed", "error": "ValueError: bad", "out_of_memory": False}
    assert _codes(_data(status=crashed)) == ["run_crashed"]
    oom = {**crashed, "error": "RuntimeError: DefaultCPUAllocator: not enough memory",
           "out_of_memory": True}  # fmt: skip
    (finding,) = doctor.diagnose(_data(status=oom, config={"lora": {"enabled": False}}))
    assert finding.code == "out_of_memory" and "lora.enabled=true" in finding.fix
    assert _codes(_data(status={"state": "killed"})) == ["out_of_memory"]


def test_a_running_status_whose_process_died_reads_as_killed(tmp_path):
    write_status(tmp_path, "running")
    assert read_status(tmp_path)["state"] == "running"  # this process is alive
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    record = json.loads((tmp_path / "status.json").read_text())
    record["pid"] = int(dead.stdout)
    (tmp_path / "status.json").write_text(json.dumps(record))
    assert read_status(tmp_path)["state"] == "killed"


# -- the command on real tiny runs --------------------------------------------------------------
def _tiny(tiny_dir, run, *extra):
    fixed = ["train.steps=2", "train.general_check=false", "train.save_model=false"]
    return build_config({}, [*tiny_run_overrides(tiny_dir, run), *fixed, *extra])


def _doctor_json(run):
    result = CliRunner().invoke(app, ["doctor", str(run), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def test_doctor_on_a_finished_run_that_pays_repeats(tiny_dir, tmp_path):
    run = tmp_path / "run"
    train(_tiny(tiny_dir, run, "reward.repeat=1.0"), progress=False)
    report = _doctor_json(run)
    assert report["state"] == "finished"
    codes = {f["code"]: f for f in report["findings"]}
    assert codes["repeated_calls"]["severity"] == "error"
    assert codes["repeated_calls"]["fix"][0] == "reward.repeat=-0.3"
    assert set(codes["repeated_calls"]) == {"code", "severity", "title", "evidence", "fix"}


@pytest.mark.parametrize(("error", "code"), [(ValueError("a bad tool"), "run_crashed"),
                                             (MemoryError(), "out_of_memory")])  # fmt: skip
def test_doctor_on_a_run_that_crashed_mid_way(tiny_dir, tmp_path, error, code):
    run = tmp_path / "run"

    def crash(step):
        raise error

    with pytest.raises(type(error)):
        train(_tiny(tiny_dir, run), progress=False, on_step=crash)
    data = load_run(run)
    assert len(data.metrics) == 1 and data.summary is None  # one step logged, no summary
    report = _doctor_json(run)
    assert report["state"] == "crashed" and report["findings"][0]["code"] == code


def test_doctor_on_a_run_that_is_still_going(tiny_dir, tmp_path):
    run = tmp_path / "run"
    seen = {}

    def look(step):  # the doctor, from the side, while the run is between steps
        seen[step] = _doctor_json(run)["state"]

    train(_tiny(tiny_dir, run), progress=False, on_step=look)
    assert seen == {1: "running", 2: "running"} and _doctor_json(run)["state"] == "finished"
    assert os.getpid() == read_status(run)["pid"]


def test_doctor_names_a_directory_that_is_not_a_run(tmp_path):
    result = CliRunner().invoke(app, ["doctor", str(tmp_path)])
    assert result.exit_code != 0 and "not a run directory" in result.output
