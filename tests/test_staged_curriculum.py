"""curriculum.staged: the training loop runs the curriculum's stages of several families."""

import json

import pytest

import agentrl.train.sampler as sampler_mod
from agentrl.config import ConfigError, build_config
from agentrl.train import train
from agentrl.train.build import collect_demos, env_factory

pytest.importorskip("reasoning_gym")  # the math family (dev extra)

STAGES = 'curriculum.stages=[["weather"], ["math"]]'


def staged_overrides(tiny_dir, run, *extra: str) -> list[str]:
    return [f"model.name={tiny_dir}", f"train.run_dir={run}", "train.steps=2",
            "train.eval_episodes=0", "train.warmstart_demos=0", "rollout.group_size=4",
            "rollout.groups_per_step=4", "rollout.max_new_tokens=16",
            "rollout.max_total_tokens=500", "curriculum.enabled=true", "curriculum.staged=true",
            STAGES, "train.checkpoint_every=1", *extra]  # fmt: skip


def read(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_staged_run_plays_the_current_stage_and_moves_its_levels(tiny_dir, tmp_path, monkeypatch):
    """Started in stage 2 (math at level 3) with no review: every episode is math; the tiny
    fixture model fails, so math is demoted 3 -> 2 -> 1, and the state is checkpointed."""
    made = sampler_mod.make_curriculum

    def start_in_stage_2(cfg):
        cur = made(cfg)
        cur.stage, cur.level["math"] = 1, 3
        return cur

    monkeypatch.setattr(sampler_mod, "make_curriculum", start_in_stage_2)
    run = tmp_path / "run"
    cfg = build_config({}, staged_overrides(tiny_dir, run, "curriculum.window=16",
                                            "curriculum.review_fraction=0.0"))  # fmt: skip
    train(cfg, progress=False)
    trajs = read(run / "trajectories.jsonl")
    assert {t["info"]["env_id"] for t in trajs} == {"math"}
    assert all(t["success"] is False for t in trajs)
    assert [sorted({t["level"] for t in trajs if t["step"] == s}) for s in (0, 1)] == [[3], [2]]
    lines = read(run / "metrics.jsonl")
    assert [m["curriculum/stage"] for m in lines] == [2.0, 2.0]
    assert [m["curriculum/math/level"] for m in lines] == [2.0, 1.0]
    from agentrl.checkpoint import latest_checkpoint, load_checkpoint

    state = load_checkpoint(latest_checkpoint(run / "checkpoints"))["state"]["curriculum"]
    assert state["stage"] == 1 and state["level"] == {"weather": 1, "math": 1}


def test_review_mixes_families_in_one_step_with_metrics_per_env(tiny_dir, tmp_path, monkeypatch):
    made = sampler_mod.make_curriculum

    def start_in_stage_2(cfg):
        cur = made(cfg)
        cur.stage = 1
        return cur

    monkeypatch.setattr(sampler_mod, "make_curriculum", start_in_stage_2)
    run = tmp_path / "run"
    train(build_config({}, staged_overrides(tiny_dir, run, "curriculum.review_fraction=0.5")),
          progress=False)  # fmt: skip
    trajs = read(run / "trajectories.jsonl")
    lines = read(run / "metrics.jsonl")
    mixed = 0
    for m in lines:
        envs = {t["info"]["env_id"] for t in trajs if t["step"] == m["step"]}
        if envs == {"weather", "math"}:
            mixed += 1
            wins = [t["success"] for t in trajs if t["step"] == m["step"]]
            assert m["rollout/math/success_rate"] == 0.0 == m["rollout/weather/success_rate"]
            assert m["rollout/success_rate"] == sum(wins) / len(wins)
        else:
            assert "rollout/math/success_rate" not in m
    assert mixed >= 1  # this seed mixes weather (review) and math (current stage) in a step
    # each group is one family: its G episodes share env, seed and level
    for g in {t["group_id"] for t in trajs}:
        group = [t for t in trajs if t["group_id"] == g]
        assert len({(t["info"]["env_id"], t["info"]["seed"], t["level"]) for t in group}) == 1


def test_staged_warm_start_draws_demonstrations_from_every_family():
    cfg = build_config({}, ["curriculum.enabled=true", "curriculum.staged=true", STAGES])
    demos = collect_demos(env_factory(cfg), 4, [1], seed0=5, env_ids=["weather", "math"])
    tools = [sorted(t["function"]["name"] for t in schemas) for _, schemas in demos]
    assert tools[0] == tools[2] == ["get_local_time", "get_weather"]
    assert tools[1] == tools[3] != tools[0]
    assert all(msgs[-1]["role"] == "assistant" for msgs, _ in demos)


def test_staged_needs_enabled_and_known_env_ids():
    with pytest.raises(ConfigError, match="curriculum.staged=true .* curriculum.enabled=true"):
        build_config({}, ["curriculum.staged=true"])
    cfg = build_config({}, ["curriculum.enabled=true", "curriculum.staged=true",
                            'curriculum.stages=[["weather"], ["no_such_env"]]'])  # fmt: skip
    with pytest.raises(Exception, match="no_such_env"):
        env_factory(cfg)
