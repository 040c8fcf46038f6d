"""``agentrl doctor`` on deliberately broken runs of the tiny model (the configs in
tests/monitor/broken/): each is named by its code, and a healthy run has no error.

Every run starts from one warm-started copy of the tiny model (64 demonstrations, the demo's
warm start). About 85 s on 2 cores. The tiny fixture model still makes no parsable call after
that warm start, so every run's reward is 0: lr_too_high (an entropy bonus gives it a
gradient) and kl_zero are named from their KL series, rewards_repeats and format_only from
their reward settings; test_doctor.py covers the behavioural signatures (repeats, format-only
gains) on hand-made episodes."""

import json
from pathlib import Path

import pytest

from agentrl.config import load_config
from agentrl.monitor.doctor import diagnose
from agentrl.monitor.rundata import load_run
from agentrl.train import train

BROKEN = Path(__file__).parent / "broken"


def _small(model, run):
    return [f"model.name={model}", f"train.run_dir={run}", "train.warmstart_demos=0",
            "train.eval_episodes=0", "train.general_check=false", "task.max_turns=4",
            "rollout.group_size=4", "rollout.groups_per_step=4", "rollout.max_new_tokens=32",
            "rollout.max_total_tokens=1024", "rollout.dtype=float32", "train.autocast=off",
            "train.checkpoint_every=0", "train.save_model=false"]  # fmt: skip


@pytest.fixture(scope="module")
def warm_model(tiny_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("warm") / "run"
    cfg = load_config(None, [f"model.name={tiny_dir}", f"train.run_dir={run}", "train.steps=0",
                             "train.eval_episodes=0", "train.general_check=false",
                             "rollout.dtype=float32", "train.autocast=off"])  # fmt: skip
    train(cfg, progress=False)
    return run / "model"


# kl_unconstrained needs 20 steps; its signal is the coefficient alone, so 4 episodes a step do
SMALLER = {"kl_zero": ["rollout.group_size=2", "rollout.groups_per_step=2"]}


def _codes(warm_model, tmp_path, name):
    run = tmp_path / name
    overrides = [*_small(warm_model, run), *SMALLER.get(name, [])]
    train(load_config(BROKEN / f"{name}.yaml", overrides), progress=False)
    findings = diagnose(load_run(run))
    print(name, [(f.code, f.severity, f.title) for f in findings])
    return {f.code: f for f in findings}


@pytest.mark.parametrize(
    ("name", "code"),
    [("lr_too_high", "kl_explosion"), ("kl_zero", "kl_unconstrained"),
     ("reward_zero", "reward_flat"), ("rewards_repeats", "repeated_calls"),
     ("format_only", "reward_hacking")],
)  # fmt: skip
def test_a_broken_run_is_named(warm_model, tmp_path, name, code):
    found = _codes(warm_model, tmp_path, name)
    assert code in found, sorted(found)
    assert found[code].fix and all("=" in f for f in found[code].fix)  # --set overrides


def test_a_healthy_run_has_nothing_serious(warm_model, tmp_path):
    found = _codes(warm_model, tmp_path, "healthy")
    assert not [f for f in found.values() if f.severity == "error"], found
    status = json.loads((tmp_path / "healthy" / "status.json").read_text())
    assert status["state"] == "finished"
