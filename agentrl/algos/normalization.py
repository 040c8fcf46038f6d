"""Reward normalization: running mean/std (state kept in checkpoints) or clipping to [0, 1]."""

from __future__ import annotations

from typing import Any

import torch

MODES = ("none", "running", "clip")


class RunningMeanStd:
    """Running mean and (population) variance of a scalar stream, merged batch by batch.

    Uses the parallel-variance formula (Chan et al.), in float64, so merging batches gives
    the same numbers as computing over all values at once.
    """

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.var = 0.0

    def update(self, x: torch.Tensor) -> None:
        """Merge a 1-D batch of values."""
        x = x.detach().to(torch.float64).flatten()
        n = x.numel()
        if n == 0:
            return
        b_mean, b_var = float(x.mean()), float(x.var(unbiased=False))
        total = self.count + n
        delta = b_mean - self.mean
        m2 = self.var * self.count + b_var * n + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.var = m2 / total
        self.count = total

    @property
    def std(self) -> float:
        return self.var**0.5

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count, "mean": self.mean, "var": self.var}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count, self.mean, self.var = int(state["count"]), state["mean"], state["var"]


class RewardNormalizer:
    """Episode rewards -> normalized rewards for the advantage estimator.

    ``none``: unchanged. ``running``: merge the batch's valid rewards into the running
    statistics, then ``(r - mean) / (std + eps)``. ``clip``: ``clamp(r, 0, 1)``.
    """

    def __init__(self, mode: str = "none", eps: float = 1e-6) -> None:
        if mode not in MODES:
            raise ValueError(
                f"config field 'algo.reward_norm' must be one of {MODES}, got {mode!r}"
            )
        self.mode, self.eps = mode, eps
        self.stats = RunningMeanStd()

    def __call__(
        self,
        rewards: torch.Tensor,  # (N,) episode rewards
        valid: torch.Tensor,  # (N,) bool: only valid episodes update the statistics
    ) -> torch.Tensor:  # (N,)
        if self.mode == "clip":
            return rewards.clamp(0.0, 1.0)
        if self.mode == "running":
            self.stats.update(rewards[valid])
            return ((rewards - self.stats.mean) / (self.stats.std + self.eps)).to(rewards.dtype)
        return rewards

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, **self.stats.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats.load_state_dict(state)
