"""The centralized critic (`algo.ppo.critic: central`): joint views by hand, the views the team
rollout records, values placed where turn-level GAE reads them, its value regression, and PPO
steps on meeting_duo through `agentrl train` with a central and a per-agent critic."""

import json
import random

import pytest
import torch

from agentrl.algos.value import make_critic
from agentrl.config import ConfigError, build_config
from agentrl.multiagent.central_critic import (
    central_setup,
    central_value_update,
    central_values,
    joint_views,
)
from agentrl.rollout import EpisodeSpec
from agentrl.types import RewardBreakdown, Trajectory
from tests.multiagent.test_team_rollout import _play


def _agent(ids, turns, k, views, team="t0"):
    return Trajectory(task_id="x", group_id=0, messages=[], token_ids=ids,
                      loss_mask=[int(t >= 0) for t in turns], logprobs=[0.0] * len(ids),
                      turn_of_token=turns, reward=RewardBreakdown(), termination="success",
                      info={"team": team, "agent_index": k, "views": views})  # fmt: skip


def test_joint_views_by_hand():
    # agent 0: prompt 10 11, turn 0 = 12 13, delta 14, turn 1 = 15; agent 1: prompt 20 21 22,
    # turn 0 = 23 24. Order: a0 turn 0, a1 turn 0, a0 turn 1.
    a0 = _agent([10, 11, 12, 13, 14, 15], [-1, -1, 0, 0, -1, 1], 0, [[2, 0], [5, 5]])
    a1 = _agent([20, 21, 22, 23, 24], [-1, -1, -1, 0, 0], 1, [[4, 3]])
    views = joint_views([a0, a1])
    got = [(v.row, v.pos, v.ids) for v in views]
    assert got == [
        (0, 1, [10, 11]),  # a0 turn 0: a1 had nothing yet
        (0, 4, [20, 21, 22, 23, 24, 10, 11, 12, 13, 14]),  # a0 turn 1: a1's whole first turn
        (0, 5, [20, 21, 22, 23, 24, 10, 11, 12, 13, 14, 15]),  # a0 final: everything
        (1, 2, [10, 11, 12, 13, 20, 21, 22]),  # a1 turn 0: a0's first turn, then its prompt
        (1, 4, [10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24]),  # a1 final
    ]


def test_team_rollout_records_when_each_turn_began(tiny_policy):
    _, tok = tiny_policy
    trajs, _, _ = _play(tok, [EpisodeSpec(seed=3, level=1, group_id=0)])
    cal, con = trajs
    assert len(cal.info["views"]) == cal.info["turns"] == 4
    assert len(con.info["views"]) == con.info["turns"] == 3
    for t, k in ((cal, 0), (con, 1)):
        starts = [t.turn_of_token.index(j) for j in range(t.info["turns"])]
        assert [v[k] for v in t.info["views"]] == starts  # own length = the turn's first token
    # the contacts agent's first turn began right after the calendar agent's first turn ended
    seen = con.info["views"][0][0]
    assert cal.turn_of_token[seen - 1] == 0 and cal.turn_of_token[seen] == -1
    # and it saw nothing of the calendar agent's second turn
    assert seen < cal.turn_of_token.index(1)


def test_central_values_sit_at_turn_starts_and_match_the_critic(tiny_policy):
    model, tok = tiny_policy
    trajs, _, _ = _play(tok, [EpisodeSpec(seed=3, level=1, group_id=0)])
    critic = make_critic(model, "central")
    torch.manual_seed(0)
    torch.nn.init.normal_(critic.head.proj.weight, std=0.1)
    views = joint_views(trajs)
    width = max(len(t.token_ids) for t in trajs)
    values = central_values(critic, views, (2, width), pad_id=0)
    assert int((values != 0).sum()) == len(views) == 4 + 1 + 3 + 1
    v = views[5]  # the contacts agent's first turn: its joint view, valued alone
    with torch.no_grad():
        alone = critic(torch.tensor([v.ids]), torch.ones(1, len(v.ids), dtype=torch.long))
    assert values[v.row, v.pos] == pytest.approx(float(alone[0, -1]), abs=1e-5)
    assert trajs[1].turn_of_token[v.pos + 1] == 0  # the value before its first sampled token


def test_central_value_update_fits_targets_and_leaves_the_policy(tiny_policy):
    model, tok = tiny_policy
    trajs, _, _ = _play(tok, [EpisodeSpec(seed=3, level=1, group_id=0)])
    critic = make_critic(model, "central")
    policy_param = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.AdamW([{"params": [policy_param]},
                                   {"params": list(critic.parameters())}], lr=1e-3)  # fmt: skip
    views = joint_views(trajs)
    width = max(len(t.token_ids) for t in trajs)
    old = central_values(critic, views, (2, width), pad_id=0)[:, :-1]  # (2, T-1) all 0
    returns = torch.zeros_like(old)
    mask = torch.zeros_like(old)
    for v in views:  # a target at each turn start; the final views get none
        t = trajs[v.row]
        if v.pos + 1 < len(t.token_ids) and t.turn_of_token[v.pos + 1] >= 0:
            returns[v.row, v.pos], mask[v.row, v.pos] = 0.8, 1.0
    kw = dict(pad_id=0, value_clip=None, batch_views=4, max_grad_norm=1.0, rng=random.Random(0))
    first = central_value_update(critic, optimizer, views, old, returns, mask, epochs=1, **kw)
    later = central_value_update(critic, optimizer, views, old, returns, mask, epochs=8, **kw)
    assert first["central_views"] == mask.sum() == 7  # the two final views have no target
    assert first["value"] == pytest.approx(0.5 * 0.8**2, rel=0.2)
    assert later["value"] < 0.25 * first["value"]
    assert policy_param.grad is None and torch.equal(policy_param, torch.zeros(3))


def test_central_critic_refuses_single_agent_episodes_and_token_level_gae():
    lone = _agent([1, 2, 3], [-1, 0, 0], 0, [[1]])
    lone.info.clear()
    with pytest.raises(ValueError, match="central values a team env"):
        central_setup(None, [lone], None)
    with pytest.raises(ConfigError, match="gae_level=turn"):
        build_config({}, ["algo.name=ppo", "algo.ppo.critic=central",
                          "algo.ppo.gae_level=token"])  # fmt: skip


@pytest.mark.parametrize("critic", ["central", "head"])
def test_one_ppo_step_on_meeting_duo(
    duo_step_config, tmp_path, duo_registered, critic, monkeypatch
):
    """PPO on the team env: the central critic trains on joint views (its value loss logged),
    the per-agent head on each agent's own context; the policy updates either way. The tiny
    model scores 0 everywhere, so a scripted reward (1 for agent 0's episodes) gives the
    zero-initialized critic a target to miss."""
    import agentrl.train.step as step_mod
    from agentrl.train.loop import train

    real_after_rollout = step_mod.after_rollout

    def scripted(state, step, trajs):
        trajs, judged = real_after_rollout(state, step, trajs)
        for t in trajs:
            t.reward.layers["completion"] = float(t.info["agent_index"] == 0)
        return trajs, judged

    monkeypatch.setattr(step_mod, "after_rollout", scripted)

    run = tmp_path / critic
    cfg = duo_step_config(run, "algo.name=ppo", f"algo.ppo.critic={critic}")
    train(cfg, progress=False)
    m = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert m["rollout/episodes"] == 4 and m["policy/updates"] >= 1
    assert m["policy/skipped_updates"] == 0 and m["loss/value"] > 0
    assert ("loss/central_views" in m) == (critic == "central")
    if critic == "central":
        assert m["loss/central_views"] >= 4  # at least one turn per agent with a target
