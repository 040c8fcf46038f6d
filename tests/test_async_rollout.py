"""Asynchronous rollout (``rollout.max_staleness``, agentrl.train.pipeline) on the tiny model.

The schedule is fixed (step j is played by the weights after max(0, j - s) updates), so an
asynchronous run is reproducible, and exact resume holds as for a synchronous one: a run killed
with SIGKILL after 5 of 6 steps and resumed from its step-4 checkpoint (which holds the two
jobs in flight and the weights they are played with) ends bitwise equal to one never killed.
Episodes call tools through ``runhelpers.ToolCallingGenerator`` (the fixture model never
writes a parsable call), and the dynamic-difficulty curriculum is on, so the sampler's groups
in flight are part of the checkpoint too.
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
from agentrl.config import ConfigError, build_config, save_config
from agentrl.train import loop, train
from agentrl.train.agent import AgentProgram
from agentrl.train.pipeline import RolloutPipeline

STEPS, STALENESS = 6, 2


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread in the runs compared here: the same reduction order in each."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _overrides(tiny_dir: Path, run: Path) -> list[str]:
    return [
        *tiny_run_overrides(tiny_dir, run),
        "rollout.max_total_tokens=560",  # room for a tool call and its result
        "rollout.group_size=4",
        f"rollout.max_staleness={STALENESS}",
        f"train.steps={STEPS}",
        "train.checkpoint_every=2",
        "algo.name=grpo",
        "curriculum.enabled=true",
        "curriculum.window=4",
    ]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(run / "model").state_dict()


@pytest.fixture(scope="module")
def straight(tiny_dir, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("async") / "straight"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "load_generator", loop.load_generator)
        use_tool_calling_generator(loop)
        train(build_config({}, _overrides(tiny_dir, run)), progress=False)
    return run


def test_each_step_trains_on_episodes_exactly_as_stale_as_the_schedule_says(straight):
    lines = replayable_metrics(straight)
    assert [m["rollout/staleness"] for m in lines] == [min(s, STALENESS) for s in range(STEPS)]
    # step 0 is played by the weights it trains: every importance weight is 1
    assert lines[0]["rollout/is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    assert lines[0]["rollout/logprob_gap"] < 1e-5
    calls = sum(len(json.loads(x)["tool_calls"])
                for x in (straight / "trajectories.jsonl").read_text().splitlines())  # fmt: skip
    assert calls >= 4  # the rewards differ, so the updates move the weights
    moved = [m["rollout/logprob_gap"] for m in lines[STALENESS:]]
    assert max(moved) > 1e-4  # stale samples are seen as stale


def test_a_checkpoint_holds_the_jobs_in_flight_with_the_weights_that_play_them(straight):
    parts = load_checkpoint(straight / "checkpoints" / "step_000004")
    jobs = parts["rollout_jobs"]
    # after 4 updates, steps 4 and 5 are submitted: played by the weights after 2 and 3
    assert [(j["step"], j["version"]) for j in jobs] == [(4, 2), (5, 3)]
    assert all(len(j["specs"]) == 4 for j in jobs)  # one group of 4 each
    assert jobs[0]["weights"].keys() == parts["policy"].keys()
    differ = [k for k in jobs[0]["weights"] if not torch.equal(jobs[0]["weights"][k],
                                                               jobs[1]["weights"][k])]  # fmt: skip
    assert differ  # two versions, two sets of weights
    pending = parts["state"]["curriculum"]["sampler_pending_groups"]
    assert sorted(pending) == [4, 5]  # the curriculum's groups still out


def test_kill_9_mid_run_then_resume_equals_the_run_never_killed(straight, tiny_dir, tmp_path):
    run = tmp_path / "killed"
    cfg_path = tmp_path / "cfg.yaml"
    save_config(build_config({}, _overrides(tiny_dir, run)), cfg_path)
    run_and_kill(cfg_path, "after_step", "5", tmp_path / "flag")  # checkpoint at 4
    assert latest_checkpoint(run / "checkpoints").name == "step_000004"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "load_generator", loop.load_generator)
        use_tool_calling_generator(loop)
        result = CliRunner().invoke(app, ["train", "--resume", str(run), "--quiet"])
    assert result.exit_code == 0, result.output
    assert replayable_metrics(run) == replayable_metrics(straight)
    a, b = _weights(straight), _weights(run)
    assert [k for k in a if not torch.equal(a[k], b[k])] == []


def test_asynchronous_rollout_refuses_what_it_cannot_correct(tmp_path):
    with pytest.raises(ConfigError, match="max_staleness"):
        build_config({}, ["rollout.max_staleness=1", "rollout.constrained=tool_calls"])
    with pytest.raises(ConfigError, match="max_staleness"):
        build_config({}, ["rollout.max_staleness=1", "rollout.search_k=2"])
    with pytest.raises(ConfigError, match="is_cap"):
        build_config({}, ["rollout.is_cap=0.5"])
    cfg = build_config({}, [f"train.run_dir={tmp_path / 'run'}", "rollout.max_staleness=1"])
    with pytest.raises(ValueError, match="rollout.max_staleness"):
        train(cfg, progress=False, agent=AgentProgram("python unused.py"))


def test_a_generator_that_cannot_fork_is_named(tiny_policy):
    model, _tok = tiny_policy

    class Scripted:
        tokenizer = None

    with pytest.raises(TypeError, match="Scripted"):
        RolloutPipeline(model, Scripted(), None, build_config({}, []), [], 0)


def test_a_lora_run_pushes_only_the_adapters_to_its_worker(tiny_dir, tmp_path):
    run = tmp_path / "lora"
    overrides = [*_overrides(tiny_dir, run), "train.steps=3", "lora.enabled=true",
                 "lora.rank=4", "train.checkpoint_every=2"]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "load_generator", loop.load_generator)
        use_tool_calling_generator(loop)
        train(build_config({}, overrides), progress=False)
    lines = replayable_metrics(run)
    assert [m["rollout/staleness"] for m in lines] == [0.0, 1.0, 2.0]
    jobs = load_checkpoint(run / "checkpoints" / "step_000002")["rollout_jobs"]
    assert [j["step"] for j in jobs] == [2] and jobs[0]["weights"]
    assert all("lora_" in name for name in jobs[0]["weights"])  # the adapters, not the base
