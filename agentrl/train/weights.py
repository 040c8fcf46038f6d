"""The weights a rollout worker is pushed: a copy of the policy's trainable parameters, and
loading them into the worker's copy (a thread's or a Ray actor's)."""

from __future__ import annotations

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
