"""IQL's pieces (agentrl.offline.iql, agentrl.offline.awr) against numbers worked out by hand."""

import math

import torch

from agentrl.algos.batch import build_batch
from agentrl.offline.awr import awr_loss, token_weights
from agentrl.offline.iql import (
    Turn,
    awr_weights,
    episode_turns,
    expectile_loss,
    fit_iql,
    td_targets,
    turn_rewards,
)
from agentrl.types import RewardBreakdown, Trajectory


def test_expectile_loss_by_hand():
    diff = torch.tensor([2.0, -1.0])  # target - prediction
    # tau = 0.7: 0.7 * 4 (under-predicted) and 0.3 * 1 (over-predicted), mean 1.55
    assert math.isclose(expectile_loss(diff, 0.7).item(), 1.55, rel_tol=1e-6)
    # tau = 0.5 is half the squared error
    assert math.isclose(expectile_loss(diff, 0.5).item(), 0.5 * 2.5, rel_tol=1e-6)


def test_awr_weights_and_td_targets_by_hand():
    q, v = torch.tensor([1.0, 0.0, 5.0]), torch.tensor([0.5, 1.0, 0.0])
    w = awr_weights(q, v, beta=2.0, cap=100.0)
    assert torch.allclose(w, torch.tensor([math.e, math.exp(-2.0), 100.0]))  # exp(10) capped
    t = td_targets(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.8, 9.0]),
                   torch.tensor([0, 0, 1]), gamma=0.9)  # fmt: skip
    assert torch.allclose(t, torch.tensor([0.45, 0.72, 1.0]))  # a done turn ignores V(s')


def test_normalized_awr_weights_by_hand():
    """Advantages 0.5, -1, 5 -> standardized over the turns, then exp(beta a'), mean 1."""
    q, v = torch.tensor([1.0, 0.0, 5.0]), torch.tensor([0.5, 1.0, 0.0])
    adv = torch.tensor([0.5, -1.0, 5.0])
    z = (adv - adv.mean()) / adv.std()  # unbiased std, as torch's default
    raw = torch.exp(2.0 * z)
    w = awr_weights(q, v, beta=2.0, cap=100.0, normalize=True)
    assert torch.allclose(w, raw / raw.mean(), atol=1e-6)
    assert math.isclose(float(w.mean()), 1.0, rel_tol=1e-6) and w[2] > w[0] > w[1]
    capped = awr_weights(q, v, beta=2.0, cap=2.0, normalize=True)  # the cap before the mean
    assert torch.allclose(capped, raw.clamp(max=2.0) / raw.clamp(max=2.0).mean(), atol=1e-6)


def _traj(reward: RewardBreakdown) -> Trajectory:
    # prompt 2 ids, turn 0 (2 ids), a tool delta, turn 1 (1 id)
    return Trajectory("t", 0, [], [5, 6, 7, 8, 9, 10], [0, 0, 1, 1, 0, 1],
                      [0.0, 0.0, -0.5, -0.25, 0.0, -1.0], [-1, -1, 0, 0, -1, 1], reward,
                      "success")  # fmt: skip


def test_turn_rewards_final_and_per_turn():
    r = RewardBreakdown({"format": 0.5, "completion": 1.0}, {"format": 0.1, "completion": 1.0},
                        [{"format": 1.0}, {"format": 0.0, "completion": 1.0}])  # fmt: skip
    assert math.isclose(r.total, 1.05)
    assert turn_rewards(_traj(r), [0, 1], "final") == [0.0, 1.05]
    # per turn: 0.1 * 1 and 0.1 * 0 + 1 * 1; the rest (1.05 - 1.1 = -0.05) at the last turn
    got = turn_rewards(_traj(r), [0, 1], "per_turn")
    assert math.isclose(got[0], 0.1) and math.isclose(got[1], 0.95)
    assert math.isclose(sum(got), r.total)


def test_turns_and_token_weights():
    traj = _traj(RewardBreakdown({"completion": 1.0}, {"completion": 1.0}))
    turns = episode_turns([traj], [0], [traj], "final")
    assert [(t.turn, t.start, t.end, t.reward, t.done) for t in turns] == [
        (0, 2, 4, 0.0, False), (1, 5, 6, 1.0, True)]  # fmt: skip
    batch = build_batch([traj], torch.tensor([True]), pad_id=0)
    w = token_weights(batch, turns, torch.tensor([2.0, 3.0]))
    # target t is token t + 1: turn 0's tokens 2, 3 are targets 1, 2; turn 1's token 5 is 4
    assert w.tolist() == [[0.0, 2.0, 2.0, 0.0, 3.0]]


def test_awr_loss_by_hand():
    logp = torch.tensor([[-1.0, -2.0, -7.0]])
    weights, mask = torch.tensor([[2.0, 0.5, 0.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    # -(2 * -1 + 0.5 * -2) / 2 sampled tokens
    assert math.isclose(awr_loss(logp, weights, mask).item(), 1.5, rel_tol=1e-6)


def test_v_fits_the_upper_expectile_of_q():
    # one state, two actions ending the episode with rewards 1 and 0: Q -> (1, 0) and V ->
    # the 0.7-expectile of {1, 0}: argmin 0.7 (1 - v)^2 + 0.3 v^2 = 0.7
    states = torch.zeros(2, 2)
    actions = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    turns = [Turn(0, 0, 1, 2, 1.0, True), Turn(1, 0, 1, 2, 0.0, True)]
    q, v, stats = fit_iql(states, actions, turns, tau=0.7, gamma=0.99, steps=200, lr=0.05)
    assert torch.allclose(q, torch.tensor([1.0, 0.0]), atol=0.02)
    assert torch.allclose(v, torch.tensor([0.7, 0.7]), atol=0.03)
    assert stats["iql/loss_q"] < 1e-3
