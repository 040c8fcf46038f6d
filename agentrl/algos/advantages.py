"""Advantage estimators: pure functions over reward tensors (DESIGN contract 5)."""

from __future__ import annotations

import torch


def group_advantages(
    rewards: torch.Tensor,  # (N,) episode rewards, N = groups * G, grouped contiguously
    group_ids: torch.Tensor,  # (N,) integer group of each episode
    valid: torch.Tensor,  # (N,) bool: False for harness faults / masked truncations
    scale: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:  # (N,) advantages; 0 where not valid
    """GRPO: reward minus its group's mean, optionally divided by the group's std.

    Invalid episodes are excluded from the group statistics (a harness fault is never a 0
    that drags the baseline down) and get advantage 0. The std is the population std.
    """
    rewards = rewards.to(torch.float64)
    adv = torch.zeros_like(rewards)
    for g in torch.unique(group_ids):
        members = (group_ids == g) & valid  # (N,)
        if members.sum() == 0:
            continue
        r = rewards[members]
        centred = r - r.mean()
        if scale:
            centred = centred / (r.std(unbiased=False) + eps)
        adv[members] = centred
    return adv.to(torch.float32)


def rloo_advantages(
    rewards: torch.Tensor,  # (N,) episode rewards, grouped
    group_ids: torch.Tensor,  # (N,)
    valid: torch.Tensor,  # (N,) bool
) -> torch.Tensor:  # (N,) advantages; 0 where not valid or alone in its group
    """RLOO: reward minus the mean of the *other* valid members of its group.

    ``A_i = r_i - (sum_j r_j - r_i) / (k - 1)`` over the group's ``k`` valid members, which is
    ``k / (k - 1)`` times the plain group-centred reward. A member alone gets 0.
    """
    rewards = rewards.to(torch.float64)
    adv = torch.zeros_like(rewards)
    for g in torch.unique(group_ids):
        members = (group_ids == g) & valid  # (N,)
        k = int(members.sum())
        if k < 2:
            continue
        r = rewards[members]
        adv[members] = r - (r.sum() - r) / (k - 1)
    return adv.to(torch.float32)


def reinforce_pp_advantages(
    rewards: torch.Tensor,  # (N,) episode rewards, grouped
    group_ids: torch.Tensor,  # (N,)
    valid: torch.Tensor,  # (N,) bool
    eps: float = 1e-6,
) -> torch.Tensor:  # (N,)
    """REINFORCE++-style baseline: group mean subtracted, then divided by the *batch* std.

    Normalizing by the std of all valid centred rewards in the batch (not per group) keeps
    groups whose members barely differ from being blown up (REINFORCE++-baseline, Hu 2025).
    """
    centred = group_advantages(rewards, group_ids, valid, scale=False).to(torch.float64)  # (N,)
    v = centred[valid]
    if v.numel() < 2:
        return centred.to(torch.float32)
    std = v.std(unbiased=False)
    return (centred / (std + eps) * valid).to(torch.float32)


def informative_episodes(
    rewards: torch.Tensor,  # (N,) episode rewards, grouped
    group_ids: torch.Tensor,  # (N,) integer group of each episode
    valid: torch.Tensor,  # (N,) bool
    tol: float = 1e-9,
) -> torch.Tensor:  # (N,) bool: the episode's group has valid rewards that differ
    """The members of groups whose valid rewards are not all equal.

    A flat group (every valid member scored the same, or fewer than two valid members) has
    advantage 0 for every member under the group-centred estimators, so its episodes add no
    policy gradient, only the KL and entropy terms: skipping them (DAPO's dynamic sampling,
    without the resampling) saves their forward and backward passes.
    """
    keep = torch.zeros(rewards.shape[0], dtype=torch.bool)
    for g in torch.unique(group_ids):
        members = group_ids == g  # (N,)
        r = rewards[members & valid].to(torch.float64)
        if r.numel() >= 2 and float(r.max() - r.min()) > tol:
            keep |= members
    return keep
