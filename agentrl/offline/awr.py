"""Advantage-weighted regression of the policy on logged turns (the policy step of IQL):
each turn's sampled tokens weigh the turn's AWR weight in a weighted log-likelihood

    L = - sum_t w(turn of t) log pi(a_t | s_t) / sum_t 1       (t over sampled tokens)

so a turn better than the state's expectile value (Q > V) is imitated more, a worse one less.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from agentrl.algos.batch import Batch, Signals
from agentrl.algos.forward import forward_logprobs
from agentrl.algos.update import run_updates
from agentrl.offline.iql import Turn


def awr_loss(
    logp: torch.Tensor,  # (B, T-1) policy log-probs of the targets
    weights: torch.Tensor,  # (B, T-1) per-token AWR weights (0 off the sampled tokens)
    mask: torch.Tensor,  # (B, T-1) 1 at sampled tokens
) -> torch.Tensor:
    """The weighted negative log-likelihood, averaged over the sampled tokens."""
    return -(weights * logp * mask).sum() / mask.sum().clamp(min=1.0)


def token_weights(batch: Batch, turns: list[Turn], weights: torch.Tensor) -> torch.Tensor:
    """(R, T-1) each turn's weight (``weights`` (N,)) at its sampled targets, 0 elsewhere
    (target t is token t + 1)."""
    out = torch.zeros_like(batch.mask)  # (R, T-1)
    for t, w in zip(turns, weights.tolist(), strict=True):
        out[t.row, max(t.start - 1, 0) : t.end - 1] = w
    return out * batch.mask


def awr_update(
    policy: Any,
    optimizer: torch.optim.Optimizer,
    batch: Batch,  # one row per context
    tok_weights: torch.Tensor,  # (R, T-1)
    *,
    epochs: int,
    batch_rows: int,
    max_grad_norm: float,
    temperature: float,
    seed: int,
) -> dict[str, Any]:
    """``epochs`` passes over the rows, ``batch_rows`` per optimizer step (the RL updates'
    ``run_updates``, the token weights as per-token signals); mean stats."""

    def micro_loss(mb: Batch, sig: Signals, share: float, _value_share: float):
        logp = forward_logprobs(policy, mb, temperature)[0]  # (b, t-1)
        loss = awr_loss(logp.float(), sig.advantages, mb.mask)
        return loss * share, {"awr_loss": share * float(loss.detach())}

    rows = len(batch.rows_with_tokens())
    return run_updates(
        policy, optimizer, batch, Signals(tok_weights), micro_loss, epochs=epochs,
        minibatches=max(1, -(-rows // max(batch_rows, 1))), max_grad_norm=max_grad_norm,
        rng=random.Random(seed), loss_agg="token_mean",
    )  # fmt: skip
