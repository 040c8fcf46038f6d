"""Schedules as pure functions of the RL step (nanoGPT style): no state, nothing to checkpoint.

``step`` counts from 0; ``total`` is the number of RL steps. Every function returns the value
to use *at* ``step``.
"""

from __future__ import annotations

import math


def _progress(step: int, total: int) -> float:
    """Fraction of the run done at ``step``: 0 at the first step, 1 at the last."""
    return 1.0 if total <= 1 else min(max(step / (total - 1), 0.0), 1.0)


def linear(step: int, total: int, start: float, end: float) -> float:
    """``start`` at step 0 moving linearly to ``end`` at step ``total - 1``."""
    return start + (end - start) * _progress(step, total)


def cosine_lr(
    step: int, total: int, base_lr: float, warmup: int = 0, min_ratio: float = 0.0
) -> float:
    """Linear warm-up over ``warmup`` steps to ``base_lr``, then cosine to ``min_ratio * base_lr``.

    Warm-up: ``base_lr * (step + 1) / warmup``; after it the cosine runs over the remaining
    ``total - warmup`` steps and reaches its floor at the last step.
    """
    if step < warmup:
        return base_lr * (step + 1) / warmup
    p = _progress(step - warmup, total - warmup)
    floor = min_ratio * base_lr
    return floor + (base_lr - floor) * 0.5 * (1.0 + math.cos(math.pi * p))


def learning_rate(
    step: int, total: int, base_lr: float, kind: str, warmup: int = 0, min_ratio: float = 0.0
) -> float:
    """``constant`` (``base_lr``, after the same linear warm-up) or ``cosine``."""
    if kind == "cosine":
        return cosine_lr(step, total, base_lr, warmup, min_ratio)
    if kind == "constant":
        return base_lr * (step + 1) / warmup if step < warmup else base_lr
    raise ValueError(
        f"config field 'algo.schedule.lr' must be 'constant' or 'cosine', got {kind!r}"
    )


def entropy_coef(step: int, total: int, start: float, end: float | None) -> float:
    """Entropy bonus decaying linearly from ``start`` to ``end`` (``None``: constant)."""
    return start if end is None else linear(step, total, start, end)


def dynamic_gamma(step: int, total: int, start: float | None, end: float) -> float:
    """Discount moving linearly from ``start`` to ``end`` (e.g. 0.9 -> 0.99); ``None``: ``end``."""
    return end if start is None else linear(step, total, start, end)


def temperature(step: int, total: int, start: float, end: float | None) -> float:
    """Sampling temperature from ``start`` to ``end`` linearly (``None``: constant)."""
    return start if end is None else linear(step, total, start, end)
