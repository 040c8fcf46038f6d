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


def test_length_grouped_minibatches_cover_rows_once_and_group_by_length():
    import random

    from agentrl.algos.grpo import length_grouped_minibatches

    lengths = [50, 900, 60, 880, 55, 910]
    groups = length_grouped_minibatches(list(range(6)), lengths, 2, random.Random(0))
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert sorted(sorted(g) for g in groups) == [[0, 2, 4], [1, 3, 5]]
