"""``algo.kl.max_per_token``: each token's KL estimate clamped in the loss, so one token the
policy has made rare (k3 = exp(ref - logp) - ...) cannot swamp the update."""

import math

import pytest
import torch

from agentrl.algos.kl import kl_estimate
from agentrl.algos.losses import grpo_loss
from agentrl.config import ConfigError, build_config


def test_the_clamp_bounds_each_token_and_stops_its_gradient():
    ref = torch.tensor([[-0.1, -0.1, -2.0]])  # (1, 3)
    logp = torch.tensor([[-0.1, -12.1, -1.0]], requires_grad=True)  # token 1: made rare
    free = kl_estimate(logp, ref, "k3")
    assert float(free.detach()[0, 1]) == pytest.approx(math.exp(12.0) - 13.0, rel=1e-5)
    clamped = kl_estimate(logp, ref, "k3", max_abs=10.0)
    assert clamped[0].tolist() == pytest.approx([0.0, 10.0, math.exp(-1.0) + 1.0 - 1.0], abs=1e-6)
    clamped.sum().backward()
    grad = logp.grad[0].tolist()
    assert grad[1] == 0.0  # past the clamp: no pull from that token
    assert grad[2] == pytest.approx(1.0 - math.exp(-1.0), abs=1e-6)  # d/dlogp of k3 below it
    # k1 can be negative: clamped on both sides
    k1 = kl_estimate(torch.tensor([[-20.0, 0.0]]), torch.tensor([[0.0, -20.0]]), "k1", 5.0)
    assert k1[0].tolist() == [-5.0, 5.0]


def test_grpo_loss_uses_the_clamped_estimate():
    logp = torch.tensor([[-0.1, -12.1, -1.0]])  # (1, 3)
    ref = torch.tensor([[-0.1, -0.1, -2.0]])
    mask, adv = torch.ones(1, 3), torch.zeros(1)
    _, free = grpo_loss(logp, logp, ref, adv, mask, kl_coef=0.1)
    _, clamped = grpo_loss(logp, logp, ref, adv, mask, kl_coef=0.1, kl_max=10.0)
    assert float(free["kl"]) > 50_000
    assert float(clamped["kl"]) == pytest.approx((0.0 + 10.0 + math.exp(-1.0)) / 3, abs=1e-5)


def test_the_config_field_reaches_the_update(tiny_dir, tmp_path, monkeypatch):
    from runhelpers import tiny_run_overrides

    import agentrl.algos.losses as losses
    from agentrl.train import train

    seen = []
    real = losses.kl_estimate

    def spy(logp, ref_logp, kind="k3", max_abs=None):
        seen.append(max_abs)
        return real(logp, ref_logp, kind, max_abs)

    monkeypatch.setattr(losses, "kl_estimate", spy)
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, tmp_path / "run"), "train.steps=1",
                            "algo.kl.max_per_token=7.5"])  # fmt: skip
    train(cfg, progress=False)
    assert seen and set(seen) == {7.5}
    with pytest.raises(ConfigError, match="max_per_token"):
        build_config({}, ["algo.kl.max_per_token=0"])
