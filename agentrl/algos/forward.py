"""Model forwards over a ``Batch``: target log-probs (the shared prompt prefix computed once),
entropies, the last hidden state for a value head, and the no-grad reference pass."""

from __future__ import annotations

import torch

from agentrl.algos.batch import Batch
from agentrl.algos.value import policy_forward
from agentrl.policy.logprobs import token_entropy, token_logprobs
from agentrl.policy.prefix import MIN_SHARED_PREFIX, batch_prefix_length, suffix_logits


def forward_logprobs(
    model,
    batch: Batch,
    temperature: float,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    with_hidden: bool = False,
) -> tuple:
    """Log-probs (B, T-1) of the batch's targets under ``model``, entropies (B, T-1) if asked.

    ``entropy_grad``: keep the entropy in the graph (for an entropy bonus). ``with_hidden``:
    also return the last hidden state (B, T, H) for a value head (a third element).
    Without ``with_hidden``, the rows' shared prompt prefix is computed once
    (``agentrl.policy.prefix``); targets inside it carry no loss and get log-prob 0.
    """
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
    return (logp, ent, hidden) if with_hidden else (logp, ent)


def loss_free_prefix_length(model, batch: Batch) -> int:
    """Tokens all rows share before any target in the loss (0 when too few to be worth it, or
    under gradient checkpointing, which does not run with a KV cache)."""
    checkpointing = getattr(model, "is_activation_checkpointing", None)
    if checkpointing is None:  # transformers releases before the rename
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if batch.input_ids.shape[0] < 2 or checkpointing:
        return 0
    n = batch_prefix_length(batch.input_ids, batch.attention)
    in_loss = batch.mask.bool().any(dim=0).nonzero()  # target t = token t + 1
    if len(in_loss):
        n = min(n, int(in_loss[0]))
    return n if n >= MIN_SHARED_PREFIX else 0


def _pad_left(x: torch.Tensor, n: int) -> torch.Tensor:
    """(B, T) -> (B, n + T) with zeros in front (the shared prefix's loss-free targets)."""
    return torch.cat([x.new_zeros(x.shape[0], n), x], dim=1) if n else x


@torch.no_grad()
def reference_logprobs(
    ref_model, batch: Batch, temperature: float, chunk: int = 16
) -> torch.Tensor:
    """Reference-policy log-probs of the batch targets, computed in chunks. (B, T-1)."""
    device = next(ref_model.parameters()).device
    out = torch.zeros_like(batch.old_logp)  # (B, T-1)
    for s in range(0, batch.input_ids.shape[0], chunk):
        rows = list(range(s, min(s + chunk, batch.input_ids.shape[0])))
        sub = batch.select(rows).to(device)
        lp = forward_logprobs(ref_model, sub, temperature)[0].to(out.device)
        out[rows, : lp.shape[1]] = lp
    return out
