import torch

from agentrl.algos.advantages import group_advantages


def test_group_advantages_scaled_by_hand():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    valid = torch.tensor([True, True, True, True])
    adv = group_advantages(rewards, groups, valid, scale=True)
    # group 0: mean 0.5, population std 0.5 -> (+1, -1); group 1: all equal -> 0
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 0.0, 0.0]), atol=1e-4)


def test_group_advantages_unscaled():
    adv = group_advantages(
        torch.tensor([3.0, 1.0, 2.0]),
        torch.tensor([0, 0, 0]),
        torch.tensor([True, True, True]),
        scale=False,
    )
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 0.0]))


def test_invalid_episodes_excluded_from_baseline_and_get_zero():
    # the harness fault (reward 0) must not pull the baseline down
    adv = group_advantages(
        torch.tensor([1.0, 0.0, 0.5]),
        torch.tensor([0, 0, 0]),
        torch.tensor([True, False, True]),
        scale=True,
    )
    # valid rewards [1, 0.5]: mean 0.75, std 0.25 -> (+1, -1); the fault gets 0
    assert torch.allclose(adv, torch.tensor([1.0, 0.0, -1.0]), atol=1e-4)
