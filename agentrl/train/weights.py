"""A rollout worker's copy of the policy, the weights it is pushed (a copy of the policy's
trainable parameters) and loading them into it (a thread's copy or a Ray actor's)."""

from __future__ import annotations

import copy
from typing import Any

import torch


def trainable_weights(policy: Any) -> dict[str, torch.Tensor]:
    """A copy of the policy's trainable parameters (a LoRA policy: its adapters)."""
    return {n: p.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}


@torch.no_grad()
def load_weights(model: Any, weights: dict[str, torch.Tensor]) -> None:
    """Copy ``weights`` into ``model``'s parameters of the same names."""
    params = dict(model.named_parameters())
    missing = sorted(set(weights) - set(params))
    if missing:
        raise KeyError(f"the rollout copy has no parameter {missing[0]!r}")
    for name, value in weights.items():
        params[name].copy_(value)


def frozen_copy(policy: Any) -> Any:
    """A copy of ``policy`` in eval mode whose parameters take no gradient."""
    model = copy.deepcopy(policy).eval()
    model.requires_grad_(False)
    return model
