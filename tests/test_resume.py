"""Exact resume (DESIGN contract 6): 8 steps straight == 4 steps, kill -9, --resume, 4 steps.

PPO and GRPO on the tiny model with every piece of carried state switched on (PPO's value
head, running reward normalization, adaptive KL, cosine LR, decaying entropy bonus, dynamic
gamma), on CPU, on episodes that call tools: the fixture model never writes a parsable call on
its own, so every run here samples through ``runhelpers.ToolCallingGenerator`` (the real
generator; a first turn whose first sampled token is even becomes a ``get_weather`` call).
Killed runs are real subprocesses ended with SIGKILL; a test-only ``on_step`` hook parks them
at a known point. Timing metrics (``time/*``, ``*_per_s``) differ between any two runs and are
left out of the comparison; everything else must match exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from runhelpers import (
    replayable_metrics,
    run_and_kill,
    tiny_run_overrides,
    use_tool_calling_generator,
)
from typer.testing import CliRunner

from agentrl.checkpoint import latest_checkpoint, load_checkpoint
from agentrl.cli import app
from agentrl.config import build_config, save_config
from agentrl.train import loop, train

STEPS = 8


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread here and in the children: the same reduction order in every run (and
    much faster than two threads on a busy 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _overrides(tiny_dir: Path, run: Path, every: int, algo: str = "ppo") -> list[str]:
    extra = ["algo.ppo.gamma_start=0.9"] if algo == "ppo" else []
    return [
        *tiny_run_overrides(tiny_dir, run),
        "rollout.max_total_tokens=560",  # room for a tool call and its result
        f"train.steps={STEPS}",
        f"train.checkpoint_every={every}",
        "train.keep_checkpoints=2",
        f"algo.name={algo}",
        "algo.minibatches=2",
        "algo.epochs=2",
        "algo.kl.coef=0.05",
        "algo.kl.control=adaptive",
        "algo.kl.horizon=10",
        "algo.reward_norm=running",
        "algo.schedule.lr=cosine",
        "algo.schedule.warmup_steps=2",
        "algo.entropy_coef=0.05",
        "algo.schedule.entropy_final=0.0",
        *extra,
    ]


def _final_state(run: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run / "model")
    state = {f"policy.{k}": v for k, v in model.state_dict().items()}
    if not (run / "critic.pt").exists():  # GRPO
        return state
    critic = torch.load(run / "critic.pt")
    return state | {f"critic.{k}": v for k, v in critic.items()}


def _resume_cli(run: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "load_generator", loop.load_generator)  # undone on exit
        use_tool_calling_generator(loop)
        result = CliRunner().invoke(app, ["train", "--resume", str(run), "--quiet"])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module", params=["ppo", "grpo"])
def straight(request, tiny_dir, tmp_path_factory) -> tuple[str, Path]:
    run = tmp_path_factory.mktemp("resume") / f"straight_{request.param}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "load_generator", loop.load_generator)
        use_tool_calling_generator(loop)
        train(build_config({}, _overrides(tiny_dir, run, 4, request.param)), progress=False)
    assert _tool_calls(run) >= 4  # the runs compared below do call tools
    return request.param, run


def _tool_calls(run: Path) -> int:
    lines = (run / "trajectories.jsonl").read_text().splitlines()
    return sum(len(json.loads(x)["tool_calls"]) for x in lines)


def _assert_same_run(a: Path, b: Path) -> None:
    lines_a, lines_b = replayable_metrics(a), replayable_metrics(b)
    assert [m["step"] for m in lines_b] == list(range(STEPS))
    assert lines_a == lines_b
    assert _tool_calls(a) == _tool_calls(b) > 0
    sa, sb = _final_state(a), _final_state(b)
    assert sa.keys() == sb.keys()
    different = [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert different == []


def test_kill_after_step_then_resume_equals_straight_run(straight, tiny_dir, tmp_path):
    algo, straight_run = straight
    run = tmp_path / "killed"
    cfg_path = tmp_path / "cfg.yaml"
    save_config(build_config({}, _overrides(tiny_dir, run, 4, algo)), cfg_path)
    # killed after 5 steps: the checkpoint is at 4, so step 4's metric line must be dropped
    run_and_kill(cfg_path, "after_step", "5", tmp_path / "flag")
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 5
    assert latest_checkpoint(run / "checkpoints").name == "step_000004"
    _resume_cli(run)
    _assert_same_run(straight_run, run)


def test_kill_during_checkpoint_write_keeps_previous_and_resume_uses_it(
    straight, tiny_dir, tmp_path
):
    algo, straight_run = straight
    if algo != "ppo":
        pytest.skip("the checkpoint write path is the same for every algorithm: PPO covers it")
    run = tmp_path / "killed_in_write"
    cfg_path = tmp_path / "cfg.yaml"
    save_config(build_config({}, _overrides(tiny_dir, run, 2, algo)), cfg_path)
    run_and_kill(cfg_path, "in_write", "step_000006", tmp_path / "flag")
    ckpts = run / "checkpoints"
    assert (ckpts / "step_000006.tmp" / "optimizer.pt").read_bytes() == b"partial"
    assert not (ckpts / "step_000006").exists()
    latest = latest_checkpoint(ckpts)
    assert latest.name == "step_000004"
    assert load_checkpoint(latest)["state"]["step"] == 4  # the previous one still loads
    _resume_cli(run)
    assert not (ckpts / "step_000006.tmp").exists()  # the leftover was cleaned up
    _assert_same_run(straight_run, run)


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    run = tmp_path / "empty"
    run.mkdir()
    save_config(build_config({}, [f"train.run_dir={run}"]), run / "config.yaml")
    result = CliRunner().invoke(app, ["train", "--resume", str(run), "--quiet"])
    assert result.exit_code == 2
    assert "no complete checkpoint" in result.output
