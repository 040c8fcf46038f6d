"""Integration: a few GRPO steps on the tiny model change the parameters and write the run."""

import json

import pytest
import torch
from runhelpers import tiny_run_overrides

from agentrl.config import build_config
from agentrl.train import train


def test_grpo_steps_change_parameters_and_write_run_dir(tiny_dir, tmp_path):
    from agentrl.policy.loading import load_policy

    before, _ = load_policy(str(tiny_dir))
    run = tmp_path / "run"
    cfg = build_config(
        {},
        [
            f"model.name={tiny_dir}",
            f"train.run_dir={run}",
            "train.steps=2",
            "train.eval_episodes=4",
            "train.warmstart_demos=0",
            "rollout.group_size=4",
            "rollout.groups_per_step=2",
            "rollout.max_new_tokens=32",
            "rollout.max_total_tokens=500",
            "algo.kl.coef=0.05",
            "train.eval_every=1",
        ],
    )
    from runhelpers import ToolCallingGenerator

    from agentrl.train import loop

    real = loop.load_generator

    def load(cfg):  # episodes that call tools, so a group's rewards differ on any machine
        model, tok, generator, device = real(cfg)
        return model, tok, ToolCallingGenerator(generator), device

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "load_generator", load)
        summary = train(cfg, progress=False)
    for when in ("before", "after"):  # the summary's rate is the rate of the saved episodes
        episodes = [json.loads(x) for x in (run / f"eval_{when}.jsonl").read_text().splitlines()]
        assert len(episodes) == 4
        assert summary[f"success_{when}"] == sum(e["success"] for e in episodes) / 4
    assert summary["episodes"] == 4 and summary["run_dir"] == str(run)
    curve = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    assert [(c["step"], c["episodes"]) for c in curve] == [(0, 0), (1, 8), (2, 16)]
    assert curve[0]["success_rate"] == summary["success_before"]
    assert curve[-1]["success_rate"] == summary["success_after"]
    assert curve[-1]["success_by_level"] == summary["eval_after"]["success_by_level"]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1]
    for key in (
        "reward/total",
        "reward/format",
        "reward/completion",
        "loss/policy",
        "loss/kl",
        "policy/entropy",
        "rollout/tokens_per_s",
        "time/step_s",
        "rollout/success_rate",
    ):
        assert key in lines[0], key
    assert lines[0]["rollout/episodes"] == 8
    trajs = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 16
    assert {"messages", "tool_calls", "reward", "termination"} <= set(trajs[0])
    for step, m in enumerate(lines):  # the logged termination shares are the episodes' own
        ends = [t["termination"] for t in trajs if t["step"] == step]
        shares = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("termination/")}
        assert shares == {e: ends.count(e) / 8 for e in set(ends)}
    assert all((t["termination"] == "success") == t["success"] for t in trajs)
    assert (run / "config.yaml").is_file() and (run / "summary.json").is_file()
    after, _ = load_policy(str(run / "model"))
    changed = [
        n
        for (n, p), (_, q) in zip(before.named_parameters(), after.named_parameters(), strict=True)
        if not torch.equal(p, q)
    ]
    assert len(changed) > 0  # only GRPO touched the weights (no warm start here)
    assert lines[0]["policy/updates"] == 2.0


def _small(tiny_dir, run, *extra):
    return build_config(
        {},
        [
            *tiny_run_overrides(tiny_dir, run),
            "algo.minibatches=1",
            *extra,
        ],
    )


def test_nan_loss_skips_updates_then_stops_with_a_checkpoint(tiny_dir, tmp_path, monkeypatch):
    import pytest

    from agentrl.algos import grpo
    from agentrl.algos.update import NonFiniteError
    from agentrl.checkpoint import latest_checkpoint, load_checkpoint

    real = grpo.grpo_loss

    def nan_loss(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return loss * float("nan"), stats

    monkeypatch.setattr(grpo, "grpo_loss", nan_loss)
    run = tmp_path / "nan"
    cfg = _small(tiny_dir, run, "train.steps=5", "train.nan_patience=2", "algo.truncation=zero")
    with pytest.raises(NonFiniteError, match="train.nan_patience=2"):
        train(cfg, progress=False)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["policy/skipped_updates"] for m in lines] == [1.0, 1.0]  # logged, then stopped
    assert [m["policy/updates"] for m in lines] == [0.0, 0.0]
    parts = load_checkpoint(latest_checkpoint(run / "checkpoints"))
    start = torch.load(run / "checkpoints" / "rl_start.pt")
    assert parts["state"]["step"] == 2
    assert all(torch.equal(v, start[k]) for k, v in parts["policy"].items())  # last good state


def test_sigterm_checkpoints_and_stops_then_resume_finishes(tiny_dir, tmp_path):
    import os
    import signal

    run = tmp_path / "term"
    cfg = _small(tiny_dir, run, "train.steps=3", "algo.name=ppo", "train.checkpoint_every=0")

    def send_term(n):
        if n == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    summary = train(cfg, progress=False, on_step=send_term)
    assert summary["interrupted"] is True
    assert (run / "checkpoints" / "step_000001" / "COMPLETE").is_file()
    assert not (run / "model").exists()  # no final save for a stopped run
    summary = train(cfg, progress=False, resume=True)
    assert summary["interrupted"] is False and (run / "model").is_dir()
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1, 2]
    for key in ("loss/value", "value/explained_var", "train/gamma", "policy/early_stop"):
        assert key in lines[-1], key


def test_curriculum_moves_levels_by_rolling_success_in_the_loop(tiny_dir, tmp_path, monkeypatch):
    """With curriculum.enabled, each group's level comes from the curriculum; the tiny fixture
    model fails, so a run started at level 3 is demoted step by step (window = one step)."""
    import agentrl.train.sampler as sampler_mod

    made = sampler_mod.make_curriculum

    def start_at_level_3(cfg):
        cur = made(cfg)
        cur.level["weather"] = 3
        return cur

    monkeypatch.setattr(sampler_mod, "make_curriculum", start_at_level_3)
    run = tmp_path / "run"
    overrides = [f"model.name={tiny_dir}", f"train.run_dir={run}", "train.steps=2",
                 "train.eval_episodes=0", "train.warmstart_demos=0", "rollout.group_size=4",
                 "rollout.groups_per_step=2", "rollout.max_new_tokens=16",
                 "rollout.max_total_tokens=500", "curriculum.enabled=true",
                 "curriculum.window=8", "train.checkpoint_every=1"]  # fmt: skip
    train(build_config({}, overrides), progress=False)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    trajs = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert all(t["success"] is False for t in trajs)
    assert {t["level"] for t in trajs if t["step"] == 0} == {3}
    assert {t["level"] for t in trajs if t["step"] == 1} == {2}
    assert [m["curriculum/weather/level"] for m in lines] == [2.0, 1.0]
    assert [m["curriculum/demotions"] for m in lines] == [1.0, 2.0]
    from agentrl.checkpoint import latest_checkpoint, load_checkpoint

    state = load_checkpoint(latest_checkpoint(run / "checkpoints"))["state"]["curriculum"]
    assert state["level"]["weather"] == 1


def test_a_bad_env_fails_before_any_model_work(tmp_path, monkeypatch):
    """task.env is checked first: no model is loaded (or built) for a run that cannot start."""
    import pytest

    import agentrl.train.build as build_mod

    def no_model(*_args, **_kwargs):
        raise AssertionError("the model was loaded before the env was checked")

    monkeypatch.setattr(build_mod, "load_policy", no_model)
    cfg = build_config({}, ["task.env=no_such_env", f"train.run_dir={tmp_path / 'run'}"])
    with pytest.raises(ValueError, match="no environment registered as 'no_such_env'"):
        train(cfg, progress=False)


def test_a_run_of_zero_steps_evaluates_once(tiny_dir, tmp_path, monkeypatch):
    """steps=0 (a warm start measured alone): the weights after equal the weights before, so
    the held-out episodes are played once and the summary's after is the before."""
    from agentrl.train import run as run_module

    calls = []
    real = run_module.Run.evaluate

    def counting(self, *args, **kwargs):
        calls.append(args[2])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(run_module.Run, "evaluate", counting)
    run = tmp_path / "run"
    summary = train(_small(tiny_dir, run, "train.steps=0", "train.eval_episodes=4"),
                    progress=False)  # fmt: skip
    assert calls == ["before"]
    assert summary["success_after"] == summary["success_before"]
    assert summary["eval_after"] == summary["eval_before"]
    curve = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    assert [c["step"] for c in curve] == [0]


def test_a_run_gives_freed_memory_back_after_each_phase(tiny_dir, tmp_path, monkeypatch):
    """After the warm start, each evaluation and each RL step the loop hands the heap's free
    pages back (``agentrl.machine.release_free_memory``): without it a real-model run's
    resident memory climbs step after step to the machine's limit."""
    from agentrl.train import loop

    phases = []
    monkeypatch.setattr(loop, "release_free_memory", lambda: phases.append("release"))
    real_step = loop.rl_step
    monkeypatch.setattr(
        loop, "rl_step", lambda *a, **k: phases.append("step") or real_step(*a, **k)
    )
    run = tmp_path / "run"
    train(_small(tiny_dir, run, "train.steps=2", "train.eval_episodes=2", "train.warmstart_demos=2",
                 "train.warmstart_epochs=1"), progress=False)  # fmt: skip
    # warm start, evaluation before, step 1, step 2, evaluation after
    assert phases == ["release", "release", "step", "release", "step", "release", "release"]
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for m in steps:  # each step logs its resident memory after the release, and the peak
        assert 0.1 < m["system/rss_gb"] <= m["system/peak_rss_gb"] < 64
