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
