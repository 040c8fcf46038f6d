"""Truncated importance weights for stale samples (agentrl.algos.offpolicy), by hand."""

import math

import torch

from agentrl.algos.batch import Batch
from agentrl.algos.losses import clipped_policy_loss
from agentrl.algos.offpolicy import correct_stale_batch, truncated_is_weights


def test_weights_are_the_ratio_truncated_at_the_cap_and_one_off_the_mask():
    prox = torch.tensor([[-1.0, -0.5, -3.0, -0.1]])
    behaviour = torch.tensor([[-1.0, -1.5, -2.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = truncated_is_weights(prox, behaviour, mask, cap=2.0)
    assert w[0, 0].item() == 1.0  # the same policy: weight 1
    assert w[0, 1].item() == 2.0  # e^1 = 2.718 truncated at the cap
    assert math.isclose(w[0, 2].item(), math.exp(-1.0), rel_tol=1e-6)  # below 1: kept
    assert w[0, 3].item() == 1.0  # not a policy token (its raw ratio e^8.9 is ignored)


def test_the_weight_scales_each_tokens_surrogate_and_carries_no_gradient():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    weight = torch.tensor([[0.5, 2.0]], requires_grad=True)
    loss, _ = clipped_policy_loss(logp, old, torch.tensor([1.0]), mask, is_weight=weight)
    assert math.isclose(loss.item(), -(0.5 + 2.0) / 2, abs_tol=1e-6)  # ratio 1, A = 1
    loss.backward()
    assert weight.grad is None  # detached inside the loss
    assert torch.allclose(logp.grad, torch.tensor([[-0.25, -1.0]]))  # d(-w r)/dlogp / 2
    plain, _ = clipped_policy_loss(logp, old, torch.tensor([1.0]), mask)
    assert math.isclose(plain.item(), -1.0, abs_tol=1e-6)  # no weight: every token weighs 1


def test_correcting_a_batch_swaps_in_the_proximal_logprobs_and_reports_the_gap():
    ids = torch.tensor([[5, 6, 7, 0]])
    behaviour = torch.tensor([[0.0, -1.0, -1.0]])
    batch = Batch(ids, torch.tensor([[1, 1, 1, 0]]), ids[:, 1:], torch.tensor([[0.0, 1.0, 1.0]]),
                  behaviour)  # fmt: skip
    prox = torch.tensor([[-4.0, -1.0, 0.0]])
    out, stats = correct_stale_batch(batch, prox, cap=2.0)
    assert torch.equal(out.old_logp, prox)  # the ratio starts from the proximal policy
    assert torch.equal(out.is_weight, torch.tensor([[1.0, 1.0, 2.0]]))
    assert math.isclose(stats["rollout/is_weight_mean"], 1.5)
    assert math.isclose(stats["rollout/is_truncated_frac"], 0.5)  # e^1 > 2 on one of two
    assert math.isclose(stats["rollout/logprob_gap"], 0.5)
    picked = out.select([0], 3)
    assert torch.equal(picked.is_weight, torch.tensor([[1.0, 1.0]]))  # minibatches carry it


def test_a_stale_token_the_policy_made_rare_does_not_blow_up_the_kl_estimate():
    from agentrl.algos.losses import grpo_loss

    logp = torch.tensor([[-12.0, -1.0]])  # the policy has made token 0 rare since it was played
    ref = torch.tensor([[-1.0, -1.0]])
    mask = torch.ones(1, 2)
    _, plain = grpo_loss(logp, logp, ref, torch.tensor([0.0]), mask, kl_coef=0.1)
    assert plain["kl"].item() > 1e4  # k3 = e^11 - 12: tens of thousands
    weight = truncated_is_weights(logp, ref, mask, cap=2.0)  # pi_prox / mu = e^-11 on token 0
    _, fixed = grpo_loss(logp, logp, ref, torch.tensor([0.0]), mask, kl_coef=0.1,
                         is_weight=weight)  # fmt: skip
    k3 = math.exp(11.0) - 11.0 - 1.0
    assert math.isclose(fixed["kl"].item(), k3 * math.exp(-11.0) / 2, rel_tol=1e-4)  # ~0.5
