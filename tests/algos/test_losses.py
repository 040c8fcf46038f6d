import math

import torch

from agentrl.algos.losses import (
    clipped_policy_loss,
    grpo_loss,
    kl_k3,
    masked_mean,
)
from agentrl.policy.logprobs import token_entropy, token_logprobs


def test_ratio_one_gives_minus_advantage():
    lp = torch.tensor([[-1.0, -2.0]])
    loss, stats = clipped_policy_loss(lp, lp.clone(), torch.tensor([0.5]), torch.ones(1, 2))
    assert math.isclose(loss.item(), -0.5, abs_tol=1e-6)
    assert stats["clip_frac"].item() == 0.0


def test_two_token_clipped_loss_by_hand():
    logp = torch.tensor([[-0.5, -2.0]])
    old = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    # token 1: ratio e^0.5 = 1.6487 -> clipped to 1.2; token 2: ratio 1
    loss_pos, stats = clipped_policy_loss(logp, old, torch.tensor([0.5]), mask, clip_eps=0.2)
    assert math.isclose(loss_pos.item(), -(1.2 * 0.5 + 0.5) / 2, abs_tol=1e-5)  # -0.55
    assert math.isclose(stats["clip_frac"].item(), 0.5)
    # negative advantage: min picks the unclipped (more pessimistic) term
    loss_neg, _ = clipped_policy_loss(logp, old, torch.tensor([-0.5]), mask, clip_eps=0.2)
    assert math.isclose(loss_neg.item(), (math.exp(0.5) * 0.5 + 0.5) / 2, abs_tol=1e-5)


def test_k3_kl_by_hand_and_grpo_total():
    logp = torch.tensor([[-0.5, -2.0]])
    ref = torch.tensor([[-1.0, -2.0]])
    kl = kl_k3(logp, ref)
    assert math.isclose(kl[0, 0].item(), math.exp(-0.5) + 0.5 - 1, abs_tol=1e-6)  # 0.10653
    assert kl[0, 1].item() == 0.0
    loss, stats = grpo_loss(
        logp, ref, ref, torch.tensor([0.5]), torch.ones(1, 2), clip_eps=0.2, kl_coef=0.1
    )
    expected_kl = (math.exp(-0.5) + 0.5 - 1) / 2
    assert math.isclose(stats["kl"].item(), expected_kl, abs_tol=1e-6)
    assert math.isclose(loss.item(), -0.55 + 0.1 * expected_kl, abs_tol=1e-5)


def test_mask_excludes_tokens_and_aggregations_differ():
    x = torch.tensor([[1.0, 3.0, 100.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert math.isclose(masked_mean(x, mask, "token_mean").item(), 2.0)  # (1+3+2)/3
    assert math.isclose(masked_mean(x, mask, "seq_mean").item(), 2.0)  # (2 + 2)/2
    mask2 = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert math.isclose(masked_mean(x, mask2, "seq_mean").item(), 2.0)  # empty row ignored


def test_token_logprobs_and_entropy_uniform():
    logits = torch.zeros(1, 2, 4)
    lp = token_logprobs(logits, torch.tensor([[0, 3]]))
    assert torch.allclose(lp, torch.full((1, 2), -math.log(4)))
    assert torch.allclose(token_entropy(logits), torch.full((1, 2), math.log(4)))
    # temperature sharpens: logits [2, 0] at T=0.5 -> softmax of [4, 0]
    lp_t = token_logprobs(torch.tensor([[[2.0, 0.0]]]), torch.tensor([[0]]), temperature=0.5)
    assert math.isclose(lp_t.item(), -math.log1p(math.exp(-4)), abs_tol=1e-6)


def test_gradient_only_through_masked_tokens():
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    loss, _ = clipped_policy_loss(
        logp, logp.detach(), torch.tensor([1.0]), torch.tensor([[1.0, 0.0]])
    )
    loss.backward()
    assert logp.grad[0, 1].item() == 0.0
    assert logp.grad[0, 0].item() < 0.0
