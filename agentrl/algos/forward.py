"""Model forwards over a ``Batch``: target log-probs (the shared prompt prefix computed once),
entropies, the last hidden state for a value head, and the no-grad reference pass.

An HF causal LM runs as its trunk (the base model: ids -> final hidden states (B, T, H)) and
its LM head, and the head is applied only at the positions that need a log-prob (the loss
tokens), ``logprobs.head_token_stats`` rows at a time under activation checkpointing: the
(B, T, V) logits are never materialized (32 x 1536 x 49,152 fp32 logits are 9.7 GB). Any other
model (no trunk/head split) falls back to its full logits (``lm_parts`` gives the reason).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from agentrl.algos.batch import Batch
from agentrl.algos.value import policy_forward
from agentrl.policy.logprobs import chunk_rows, head_token_stats, token_entropy, token_logprobs
from agentrl.policy.parts import LMParts, lm_parts
from agentrl.policy.prefix import (
    MIN_SHARED_PREFIX,
    batch_prefix_length,
    hf_model,
    suffix_hidden,
    suffix_logits,
)

__all__ = ["LMParts", "forward_logprobs", "lm_parts", "policy_hidden", "reference_logprobs"]

log = logging.getLogger(__name__)
#: False: every forward computes the full (B, T, V) logits, as before the chunked head
#: (``bench/peak_memory.py --no-chunk`` measures that path).
CHUNKED_HEAD = True
_reported: set[str] = set()


def forward_logprobs(
    model,
    batch: Batch,
    temperature: float,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    with_hidden: bool = False,
    all_positions: bool = False,
) -> tuple:
    """Log-probs (B, T-1) of the batch's targets under ``model``, entropies (B, T-1) if asked.

    Only targets in the loss (``batch.mask`` > 0) are scored; the others get 0 (all of them
    with ``all_positions``, except a shared prefix's). ``entropy_grad``: keep the entropy in
    the graph (an entropy bonus). ``with_hidden``: also return the last hidden state (B, T, H)
    for a value head (a third element). The rows' shared prompt prefix is computed once
    (``agentrl.policy.prefix``); targets inside it carry no loss and get log-prob 0.
    """
    parts = lm_parts(model) if CHUNKED_HEAD else "the chunked LM head is switched off"
    if isinstance(parts, str):
        _report(model, parts)
        return _full_forward(model, batch, temperature, with_entropy, entropy_grad, with_hidden,
                             all_positions)  # fmt: skip
    with parts.context():
        return _chunked_forward(parts, model, batch, temperature, with_entropy, entropy_grad,
                                with_hidden, all_positions)  # fmt: skip


def _chunked_forward(
    parts: LMParts, model, batch: Batch, temperature, with_entropy, entropy_grad, with_hidden,
    all_positions,
) -> tuple:  # fmt: skip
    """``forward_logprobs`` through the trunk, then the LM head at the scored positions only."""
    ids, attention = batch.input_ids, batch.attention  # (B, T)
    shared = loss_free_prefix_length(model, batch)
    prefix = None
    if shared:
        suffix, prefix = suffix_hidden(parts.decoder, ids, attention, shared, with_hidden)
    else:
        out = parts.decoder(input_ids=ids, attention_mask=attention, use_cache=False)
        suffix = out.last_hidden_state  # (B, T, H)
    scored = torch.ones_like(batch.mask, dtype=torch.bool) if all_positions else batch.mask > 0
    scored[:, :shared] = False  # (B, T-1)
    rows, cols = scored.nonzero(as_tuple=True)  # (N,) each, row-major
    h = suffix[rows, cols - shared]  # (N, H): hidden at position t predicts target t
    targets = batch.targets[rows, cols]  # (N,)
    lp, ent = head_token_stats(parts.head, h, targets, temperature, with_entropy, entropy_grad,
                               chunk_rows(parts.vocab))  # fmt: skip
    logp = _scatter(lp, scored, rows, cols)  # (B, T-1)
    ent = None if ent is None else _scatter(ent, scored, rows, cols)
    if not with_hidden:
        return logp, ent
    hidden = suffix
    if prefix is not None:
        hidden = torch.cat([prefix.expand(ids.shape[0], -1, -1), suffix], dim=1)  # (B, T, H)
    return logp, ent, hidden


def _scatter(x: torch.Tensor, scored: torch.Tensor, rows, cols) -> torch.Tensor:
    """(N,) values at ``(rows, cols)`` -> (B, T-1) with zeros elsewhere (differentiable)."""
    return x.new_zeros(scored.shape).index_put((rows, cols), x)


def _full_forward(
    model, batch: Batch, temperature, with_entropy, entropy_grad, with_hidden, all_positions
) -> tuple:
    """``forward_logprobs`` from the model's full logits (B, T, V)."""
    shared = 0 if with_hidden else loss_free_prefix_length(model, batch)
    if shared:
        logits, hidden = suffix_logits(model, batch.input_ids, batch.attention, shared), None
    else:
        logits, hidden = policy_forward(model, batch.input_ids, batch.attention, with_hidden)
    logits = logits[:, :-1]  # (B, T-1-shared, V): predictions of targets shared..T-2
    logp = _pad_left(token_logprobs(logits, batch.targets[:, shared:], temperature), shared)
    ent = None
    if with_entropy:
        ent = token_entropy(logits if entropy_grad else logits.detach(), temperature)
        ent = _pad_left(ent, shared)
    if not all_positions:  # the same contract as the chunked path: loss targets only
        keep = batch.mask > 0  # (B, T-1)
        logp = torch.where(keep, logp, 0.0)
        ent = None if ent is None else torch.where(keep, ent, 0.0)
    return (logp, ent, hidden) if with_hidden else (logp, ent)


def _report(model, reason: str) -> None:
    """Log once per model class why it runs with full logits."""
    key = f"{type(model).__name__}: {reason}"
    if key not in _reported:
        _reported.add(key)
        log.info("full (B, T, V) logits for %s", key)


def policy_hidden(model: Any, input_ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """The last hidden state (B, T, H) of a causal LM, without its LM head when it has a
    trunk/head split (``lm_parts``), else from the full forward's hidden states."""
    parts = lm_parts(model)
    if isinstance(parts, str):
        return policy_forward(model, input_ids, attention, True)[1]
    with parts.context():
        out = parts.decoder(input_ids=input_ids, attention_mask=attention, use_cache=False)
    return out.last_hidden_state


def loss_free_prefix_length(model, batch: Batch) -> int:
    """Tokens all rows share before any target in the loss (0 when too few to be worth it, or
    under gradient checkpointing, which does not run with a KV cache)."""
    if batch.input_ids.shape[0] < 2 or activation_checkpointing(model):
        return 0
    n = batch_prefix_length(batch.input_ids, batch.attention)
    in_loss = batch.mask.bool().any(dim=0).nonzero()  # target t = token t + 1
    if len(in_loss):
        n = min(n, int(in_loss[0]))
    return n if n >= MIN_SHARED_PREFIX else 0


def activation_checkpointing(model) -> bool:
    """Whether the model recomputes its layers in the backward (gradient checkpointing)."""
    model = hf_model(model)
    on = getattr(model, "is_activation_checkpointing", None)
    if on is None:  # transformers releases before the rename
        on = getattr(model, "is_gradient_checkpointing", False)
    return bool(on)


def _pad_left(x: torch.Tensor, n: int) -> torch.Tensor:
    """(B, T) -> (B, n + T) with zeros in front (the shared prefix's loss-free targets)."""
    return torch.cat([x.new_zeros(x.shape[0], n), x], dim=1) if n else x


@torch.no_grad()
def reference_logprobs(
    ref_model, batch: Batch, temperature: float, chunk: int = 16
) -> torch.Tensor:
    """Reference-policy log-probs (B, T-1) of the batch's loss targets (0 elsewhere), computed
    ``chunk`` rows at a time."""
    device = next(ref_model.parameters()).device
    out = torch.zeros_like(batch.old_logp)  # (B, T-1)
    for s in range(0, batch.input_ids.shape[0], chunk):
        rows = list(range(s, min(s + chunk, batch.input_ids.shape[0])))
        sub = batch.select(rows).to(device)
        lp = forward_logprobs(ref_model, sub, temperature)[0].to(out.device)
        out[rows, : lp.shape[1]] = lp
    return out
