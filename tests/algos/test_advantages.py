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

    from agentrl.algos.update import length_grouped_minibatches

    lengths = [50, 900, 60, 880, 55, 910]
    groups = length_grouped_minibatches(list(range(6)), lengths, 2, random.Random(0))
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert sorted(sorted(g) for g in groups) == [[0, 2, 4], [1, 3, 5]]


def test_rloo_leave_one_out_by_hand():
    from agentrl.algos.advantages import rloo_advantages

    adv = rloo_advantages(
        torch.tensor([1.0, 0.0, 0.5, 7.0]),
        torch.tensor([0, 0, 0, 1]),
        torch.tensor([True, True, True, True]),
    )
    # group 0: 1 - (0+0.5)/2 = 0.75; 0 - 0.75 = -0.75; 0.5 - 0.5 = 0; group 1 alone -> 0
    assert torch.allclose(adv, torch.tensor([0.75, -0.75, 0.0, 0.0]))


def test_reinforce_pp_batch_std_by_hand():
    from agentrl.algos.advantages import reinforce_pp_advantages

    adv = reinforce_pp_advantages(
        torch.tensor([1.0, 0.0, 1.0, 1.0]),
        torch.tensor([0, 0, 1, 1]),
        torch.tensor([True, True, True, True]),
    )
    # centred (0.5, -0.5, 0, 0); batch population std sqrt(0.5/4) = 0.353553
    assert torch.allclose(adv, torch.tensor([1.41421, -1.41421, 0.0, 0.0]), atol=1e-4)


def test_micro_batches_respect_accumulation_and_token_budget():
    from agentrl.algos.update import micro_batches

    lengths = [10, 10, 30, 30, 50]
    assert micro_batches([0, 1, 2, 3], lengths, grad_accum=2) == [[0, 1], [2, 3]]
    # budget 60 padded tokens: (10,10,30)->3*30=90 too big; pieces [0,1] (20), [2,3] (60), [4]
    assert micro_batches([0, 1, 2, 3, 4], lengths, 1, token_budget=60) == [[0, 1], [2, 3], [4]]


def test_nan_guard_counts_skips_in_a_row_across_steps():
    from agentrl.algos.update import NanGuard

    guard = NanGuard(patience=3)
    assert not guard.observe([True, False, False])
    assert not guard.observe([True, False])  # a good update resets the count
    assert guard.observe([False, False])  # three in a row across two steps
    assert guard.total_skipped == 5


def test_autocast_dtype_choices():
    import pytest

    from agentrl.precision import autocast_dtype

    assert autocast_dtype("auto", "cpu") is None  # CPU: full precision unless asked
    assert autocast_dtype("off", "cuda") is None
    assert autocast_dtype("bf16", "cpu") == torch.bfloat16
    with pytest.raises(ValueError, match="train.autocast"):
        autocast_dtype("fp8", "cpu")
