"""Generalized Advantage Estimation (Schulman et al. 2016) over ragged steps: pure functions.

A *step* is either an assistant turn (turn-level GAE: rewards arrive at turn ends, one value
per turn start) or a policy token (token-level GAE: the turn's reward sits on its last token).
Episodes have different numbers of steps, so every tensor is left-aligned and padded, with a
``mask`` of real steps. After the last real step the value is ``bootstrap``: V(final state) for
a truncated episode (it could have gone on), 0 for a terminated one (DESIGN contract 3).
"""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,  # (B, S) reward received after step t
    values: torch.Tensor,  # (B, S) V(s_t), the value of the state in which step t is taken
    mask: torch.Tensor,  # (B, S) 1 = real step; real steps are left-aligned
    bootstrap: torch.Tensor,  # (B,) value after the last real step: V(s_end) or 0
    discount: float | torch.Tensor,  # gamma, or (B, S): discount between step t and t+1
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # advantages (B, S), returns (B, S); 0 on padding
    """GAE: ``A_t = d_t + discount_t * lam * A_{t+1}``, ``d_t = r_t + discount_t V_{t+1} - V_t``.

    ``V_{t+1}`` is the next real step's value, or ``bootstrap`` after the last real step.
    Returns the advantages and the value targets ``R_t = A_t + V_t``.
    """
    mask = mask.to(values.dtype)
    b, s = rewards.shape
    if isinstance(discount, torch.Tensor):
        disc = discount.to(values.dtype)  # (B, S)
    else:
        disc = torch.full((b, s), float(discount), dtype=values.dtype)
    adv = torch.zeros_like(values)  # (B, S)
    next_adv = torch.zeros(b, dtype=values.dtype)  # (B,) A_{t+1}; 0 after the last step
    next_value = bootstrap.to(values.dtype)  # (B,) V_{t+1}
    for t in reversed(range(s)):
        m = mask[:, t]  # (B,)
        delta = rewards[:, t] + disc[:, t] * next_value - values[:, t]  # (B,)
        a = delta + disc[:, t] * lam * next_adv  # (B,)
        adv[:, t] = a * m
        # on padding keep carrying the bootstrap: the last real step sees it as V_{t+1}
        next_value = torch.where(m > 0, values[:, t], next_value)
        next_adv = torch.where(m > 0, a, next_adv)
    returns = (adv + values) * mask  # (B, S)
    return adv, returns


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked entries (population std); 0 elsewhere. Any shape."""
    mask = mask.to(x.dtype)
    n = mask.sum().clamp(min=1.0)
    mean = (x * mask).sum() / n
    var = (((x - mean) * mask) ** 2).sum() / n
    return (x - mean) / torch.sqrt(var + eps) * mask
