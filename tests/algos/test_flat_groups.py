"""``algo.grpo.skip_flat_groups``: groups whose rewards are all equal carry no policy gradient
and are left out of the update; the step's metrics still count every episode."""

import json

import pytest
import torch

from agentrl.algos.advantages import group_advantages, informative_episodes
from agentrl.algos.grpo import without_flat_groups
from agentrl.config import ConfigError, build_config
from agentrl.types import RewardBreakdown, Trajectory


def test_informative_episodes_are_the_members_of_groups_whose_rewards_differ():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.3, 0.3, 0.2, 0.9, 0.5])  # (9,)
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 4])
    valid = torch.tensor([True, True, True, True, True, True, True, False, True])
    keep = informative_episodes(rewards, groups, valid)
    # group 0 differs; 1 and 2 are flat; group 3 has one valid member (its other one is a
    # harness fault), so no baseline; a lone episode (group 4) is flat as well
    assert keep.tolist() == [True, True, False, False, False, False, False, False, False]
    # exactly the episodes whose group advantage can be non-zero
    adv = group_advantages(rewards, groups, valid)
    assert torch.equal(adv != 0, keep & valid)


def _traj(group: int, reward: float) -> Trajectory:
    return Trajectory(task_id=f"t{group}", group_id=group, messages=[], token_ids=[1, 2, 3],
                      loss_mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0], turn_of_token=[-1, 0, 0],
                      termination="answer",
                      reward=RewardBreakdown({"task": reward}, {"task": 1.0}))  # fmt: skip


def test_without_flat_groups_keeps_the_signal_and_counts_what_it_left_out():
    trajs = [_traj(0, 1.0), _traj(0, 0.0), _traj(1, 0.0), _traj(1, 0.0), _traj(-1, 0.2),
             _traj(-1, 0.7), _traj(-2, 0.4), _traj(-2, 0.4)]  # fmt: skip
    rewards = torch.tensor([t.reward.total for t in trajs])  # (8,)
    valid = torch.ones(8, dtype=torch.bool)
    kept, kept_valid, kept_rewards, stats = without_flat_groups(trajs, valid, rewards)
    assert [t.group_id for t in kept] == [0, 0, -1, -1]  # episode and sibling groups alike
    assert kept_rewards.tolist() == pytest.approx([1.0, 0.0, 0.2, 0.7])
    assert kept_valid.tolist() == [True] * 4
    assert stats == {"update/flat_groups": 2.0, "update/trained_fraction": 0.5}


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["algo.name=ppo"], "algo.name=grpo"),
        (["algo.kl.mode=reward"], "algo.kl.mode=loss"),
        (["rollout.mode=hierarchical"], "rollout.mode=hierarchical"),
    ],
)
def test_skip_flat_groups_is_refused_where_a_flat_group_still_has_advantages(overrides, named):
    with pytest.raises(ConfigError, match=named):
        build_config({}, ["algo.grpo.skip_flat_groups=true", *overrides])


def _run(tiny_dir, tmp_path, monkeypatch, group_rewards):
    """One tiny training step whose episodes are really played, then scored ``group_rewards``
    (one list per group); returns (the trajectories advantages were computed for, the step's
    metrics, whether any weight moved)."""
    from runhelpers import tiny_run_overrides

    import agentrl.train.step as step_module
    from agentrl.train import train
    from agentrl.train.build import RLModels

    real_collect, real_adv = step_module.collect, step_module.compute_advantages
    seen, moved = [], {}

    def scored(*args, **kwargs):
        trajs, extra = real_collect(*args, **kwargs)
        rewards = [r for group in group_rewards for r in group]
        for t, r in zip(trajs, rewards, strict=True):
            t.reward = RewardBreakdown({"task": r}, {"task": 1.0})
        return trajs, extra

    def spy(trajs, *args, **kwargs):
        seen.append(list(trajs))
        return real_adv(trajs, *args, **kwargs)

    real_rl_step = step_module.rl_step

    def watch(cfg, step, rl: RLModels, *args, **kwargs):
        before = [p.detach().clone() for p in rl.policy.parameters()]
        out = real_rl_step(cfg, step, rl, *args, **kwargs)
        after = list(rl.policy.parameters())
        moved["any"] = any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
        return out

    monkeypatch.setattr(step_module, "collect", scored)
    monkeypatch.setattr(step_module, "compute_advantages", spy)
    import agentrl.train.loop as loop_module

    monkeypatch.setattr(loop_module, "rl_step", watch)
    run = tmp_path / "run"
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, run), "train.steps=1",
                            f"rollout.groups_per_step={len(group_rewards)}",
                            "algo.minibatches=1", "algo.grpo.skip_flat_groups=true"])  # fmt: skip
    train(cfg, progress=False)
    (m,) = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return seen, m, moved["any"]


def test_a_step_trains_only_the_groups_with_a_signal(tiny_dir, tmp_path, monkeypatch):
    seen, m, moved = _run(tiny_dir, tmp_path, monkeypatch, [[1.0, 0.0], [0.5, 0.5]])
    ((trained),) = seen
    assert [t.group_id for t in trained] == [0, 0]  # the flat group 1 is left out
    assert m["rollout/episodes"] == 4 and m["reward/total"] == pytest.approx(0.5)
    assert m["update/flat_groups"] == 1 and m["update/trained_fraction"] == 0.5
    assert m["policy/updates"] == 1 and moved


def test_a_step_with_only_flat_groups_leaves_the_weights_alone(tiny_dir, tmp_path, monkeypatch):
    seen, m, moved = _run(tiny_dir, tmp_path, monkeypatch, [[0.0, 0.0], [1.0, 1.0]])
    assert seen == [] and not moved
    assert m["rollout/episodes"] == 4
    assert m["update/flat_groups"] == 2 and m["update/trained_fraction"] == 0.0
    assert m["policy/updates"] == 0
