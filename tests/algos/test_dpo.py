"""DPO (agentrl.algos.dpo): the loss by hand, the pairs a group gives, one update on a bigram
model following the hand-derived gradient, and the margin growing over updates."""

import math
import random

import torch
from test_grpo_update import Bigram, _batch, _logp

from agentrl.algos.dpo import dpo_loss, dpo_update, preference_pairs
from agentrl.types import RewardBreakdown, Trajectory


def test_the_loss_by_hand():
    chosen, rejected = torch.tensor([-3.0, -2.0]), torch.tensor([-4.0, -1.0])
    ref_c, ref_r = torch.tensor([-3.5, -2.0]), torch.tensor([-3.0, -1.5])
    loss, stats = dpo_loss(chosen, rejected, ref_c, ref_r, beta=0.5)
    # margins: 0.5 * ((0.5) - (-1.0)) = 0.75 and 0.5 * (0.0 - 0.5) = -0.25
    want = (math.log1p(math.exp(-0.75)) + math.log1p(math.exp(0.25))) / 2
    assert math.isclose(loss.item(), want, rel_tol=1e-6)
    assert math.isclose(stats["dpo_margin"], 0.25, rel_tol=1e-6)
    assert stats["dpo_accuracy"] == 0.5
    assert math.isclose(stats["dpo_chosen_reward"], 0.125, rel_tol=1e-6)  # (0.25 + 0) / 2


def _traj(group: int, reward: float, termination: str = "success") -> Trajectory:
    return Trajectory("t", group, [], [1], [0], [0.0], [-1],
                      RewardBreakdown({"task": reward}, {"task": 1.0}), termination)  # fmt: skip


def test_each_group_gives_its_best_over_its_worst_valid_episode():
    trajs = [_traj(0, 0.2), _traj(0, 1.0), _traj(0, 0.0), _traj(0, 5.0, "harness_error"),
             _traj(1, 0.5), _traj(1, 0.5), _traj(2, 0.9), _traj(2, 0.85)]  # fmt: skip
    valid = torch.tensor([True, True, True, False, True, True, True, True])
    assert preference_pairs(trajs, valid) == [(1, 2), (6, 7)]  # group 1 ties: no pair
    assert preference_pairs(trajs, valid, min_gap=0.1) == [(1, 2)]  # 0.05 is too close


def test_one_update_follows_the_hand_derived_gradient():
    model, beta, lr = Bigram(), 0.5, 0.1
    batch = _batch(model, rows=2)
    batch = batch.with_reference(batch.old_logp.clone())  # reference = the start: margin 0
    start = model.table.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    stats = dpo_update(model, opt, batch, [(0, 1)], beta=beta, epochs=1, minibatches=1,
                       max_grad_norm=100.0, temperature=1.0, rng=random.Random(0))  # fmt: skip
    assert stats["stepped"] == [True] and stats["dpo_pairs"] == 1.0
    ref = Bigram()
    seq = (_logp(ref, batch.input_ids) * batch.mask).sum(-1)  # (2,)
    # d loss / d margin = -sigmoid(0) = -0.5: the chosen sum goes up, the rejected one down
    grad = torch.autograd.grad(-0.5 * beta * (seq[0] - seq[1]), ref.table)[0]
    assert torch.allclose(model.table.detach(), start - lr * grad, atol=1e-6)


def test_updates_raise_the_chosen_episode_over_the_rejected_one():
    model = Bigram(seed=3)
    batch = _batch(model, rows=2)
    batch = batch.with_reference(batch.old_logp.clone())
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    first = dpo_update(model, opt, batch, [(1, 0)], beta=0.1, epochs=1, minibatches=1,
                       max_grad_norm=1.0, temperature=1.0, rng=random.Random(0))  # fmt: skip
    later = dpo_update(model, opt, batch, [(1, 0)], beta=0.1, epochs=20, minibatches=1,
                       max_grad_norm=1.0, temperature=1.0, rng=random.Random(0))  # fmt: skip
    assert first["dpo_margin"] == 0.0  # the first step starts at the reference
    assert later["dpo_margin"] > 0.05 and later["dpo_accuracy"] == 1.0
    assert later["total"] < math.log(2)  # below the loss at margin 0
