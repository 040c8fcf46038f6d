"""KL estimators, KL controllers, schedules and reward normalization, by hand."""

import math

import pytest
import torch

from agentrl.algos import schedules
from agentrl.algos.kl import KLController, adaptive_coef, decayed_coef, kl_estimate
from agentrl.algos.normalization import RewardNormalizer, RunningMeanStd


def test_kl_estimators_by_hand():
    logp = torch.tensor([[-0.5, -2.0]])
    ref = torch.tensor([[-1.0, -1.0]])  # r = ref - logp = (-0.5, +1)
    assert torch.allclose(kl_estimate(logp, ref, "k1"), torch.tensor([[0.5, -1.0]]))
    assert torch.allclose(kl_estimate(logp, ref, "k2"), torch.tensor([[0.125, 0.5]]))
    k3 = kl_estimate(logp, ref, "k3")
    assert k3[0, 0].item() == pytest.approx(math.exp(-0.5) + 0.5 - 1)  # 0.106531
    assert k3[0, 1].item() == pytest.approx(math.e - 2)  # 0.718282
    with pytest.raises(ValueError, match="algo.kl.estimator"):
        kl_estimate(logp, ref, "k4")


def test_adaptive_controller_update_by_hand():
    # error clipped to +-0.2; multiplier 1 + error * 64 / 10000
    assert adaptive_coef(0.01, 0.15, 0.1, 64, 10_000) == pytest.approx(0.0100128)
    assert adaptive_coef(0.01, 0.08, 0.1, 64, 10_000) == pytest.approx(0.0099872)
    assert adaptive_coef(0.01, 0.11, 0.1, 64, 10_000) == pytest.approx(0.0100064)
    assert adaptive_coef(0.01, 0.10, 0.1, 64, 10_000) == pytest.approx(0.01)
    ctl = KLController("adaptive", 0.01, target=0.1, horizon=10_000)
    ctl.update(0.15, 64)
    ctl.update(0.15, 64)
    assert ctl.value(5) == pytest.approx(0.01 * 1.00128**2)
    restored = KLController("adaptive", 0.01)
    restored.load_state_dict(ctl.state_dict())
    assert restored.value(0) == ctl.value(0)


def test_decay_and_fixed_controllers():
    assert decayed_coef(0.1, 999) == pytest.approx(0.1)
    assert decayed_coef(0.1, 1000) == pytest.approx(0.095)
    assert decayed_coef(0.1, 2500) == pytest.approx(0.09025)
    decay = KLController("decay", 0.1)
    decay.update(5.0, 64)  # ignored
    assert decay.value(2000) == pytest.approx(0.09025)
    assert KLController("fixed", 0.05).value(10**6) == 0.05
    with pytest.raises(ValueError, match="algo.kl.control"):
        KLController("pid", 0.1)


def test_cosine_lr_with_warmup_at_chosen_steps():
    lr = lambda s: schedules.cosine_lr(s, 11, 1e-3, warmup=2, min_ratio=0.1)  # noqa: E731
    assert lr(0) == pytest.approx(5e-4)  # warm-up 1/2
    assert lr(1) == pytest.approx(1e-3)
    assert lr(2) == pytest.approx(1e-3)  # cosine starts at the top
    assert lr(6) == pytest.approx(1e-4 + 9e-4 * 0.5)  # half way: 5.5e-4
    assert lr(10) == pytest.approx(1e-4)  # floor at the last step
    assert schedules.learning_rate(7, 11, 1e-3, "constant") == 1e-3


def test_linear_schedules_at_chosen_steps():
    assert schedules.entropy_coef(0, 10, 0.1, 0.01) == pytest.approx(0.1)
    assert schedules.entropy_coef(3, 10, 0.1, 0.01) == pytest.approx(0.07)
    assert schedules.entropy_coef(9, 10, 0.1, 0.01) == pytest.approx(0.01)
    assert schedules.entropy_coef(4, 10, 0.05, None) == 0.05
    assert schedules.dynamic_gamma(0, 11, 0.9, 0.99) == pytest.approx(0.9)
    assert schedules.dynamic_gamma(5, 11, 0.9, 0.99) == pytest.approx(0.945)
    assert schedules.dynamic_gamma(10, 11, 0.9, 0.99) == pytest.approx(0.99)
    assert schedules.temperature(2, 5, 1.0, 0.5) == pytest.approx(0.75)
    assert schedules.temperature(2, 5, 1.0, None) == 1.0


def test_running_mean_std_merges_batches_exactly():
    rms = RunningMeanStd()
    rms.update(torch.tensor([1.0, 2.0, 3.0]))
    rms.update(torch.tensor([4.0, 5.0]))
    assert rms.mean == pytest.approx(3.0) and rms.var == pytest.approx(2.0)  # of 1..5
    norm = RewardNormalizer("running")
    norm(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([True, True, True]))
    out = norm(torch.tensor([4.0, 5.0, 99.0]), torch.tensor([True, True, False]))
    # the invalid 99 is not merged; (4 - 3)/sqrt(2), (5 - 3)/sqrt(2)
    assert torch.allclose(out[:2], torch.tensor([0.70711, 1.41421]), atol=1e-4)
    again = RewardNormalizer("running")
    again.load_state_dict(norm.state_dict())
    assert again.stats.count == 5


def test_clip_normalization_and_bad_mode():
    out = RewardNormalizer("clip")(torch.tensor([-0.5, 0.3, 1.7]), torch.ones(3, dtype=bool))
    assert torch.allclose(out, torch.tensor([0.0, 0.3, 1.0]))
    with pytest.raises(ValueError, match="algo.reward_norm"):
        RewardNormalizer("zscore")
