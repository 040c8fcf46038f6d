"""Per-token log-probabilities and entropies: from logits (pure functions with shape comments),
or from hidden states through the LM head in chunks of positions, so that the (N, V) logits of
all positions never exist at once (``head_token_stats``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

#: Logit bytes (fp32) one LM-head chunk may hold: 64 MiB is 341 positions of a 49,152-token
#: vocabulary. A chunk's forward and backward keep about five such tensors alive at a time.
LOGITS_CHUNK_BYTES = 64 * 2**20
MIN_CHUNK_ROWS = 16


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Log-probability of each target token.

    logits: (B, T, V) predictions for positions 0..T-1; targets: (B, T) ids. Returns (B, T).
    """
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # (B, T, V)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of the next-token distribution at each position: (B, T, V) -> (B, T)."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def chunk_rows(vocab: int, chunk_bytes: int = LOGITS_CHUNK_BYTES) -> int:
    """Positions per LM-head chunk: ``chunk_bytes / (4 * vocab)``, at least ``MIN_CHUNK_ROWS``."""
    return max(MIN_CHUNK_ROWS, chunk_bytes // (4 * vocab))


def head_token_stats(
    head: Callable[[torch.Tensor], torch.Tensor],
    hidden: torch.Tensor,  # (N, H) final hidden states of the positions that need a log-prob
    targets: torch.Tensor,  # (N,) the token each position predicts
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    rows: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Target log-probs (N,) and entropies (N,) (None unless ``with_entropy``) of
    ``log_softmax(head(hidden) / temperature)``, ``rows`` positions at a time.

    With gradients on, each chunk runs under ``torch.utils.checkpoint``: its (rows, V) logits
    are dropped after the forward and recomputed in the backward, so only the chunk's hidden
    states and targets are kept. ``entropy_grad`` False: the entropy carries no gradient.
    Equal to ``token_logprobs`` / ``token_entropy`` of the full logits, position by position.
    """
    if hidden.shape[0] == 0:  # nothing to score: an empty result still attached to the graph
        empty = hidden.sum(-1).float()  # (0,)
        return empty, (empty.detach() if with_entropy else None)
    grad = torch.is_grad_enabled() and (
        hidden.requires_grad or any(p.requires_grad for p in _parameters(head))
    )

    def chunk(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp = torch.log_softmax(head(h).float() / temperature, dim=-1)  # (n, V)
        lp = logp.gather(-1, t.unsqueeze(-1)).squeeze(-1)  # (n,)
        if not with_entropy:
            return lp, lp.new_zeros(0)
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            ent = -(logp.exp() * logp).sum(-1)  # (n,)
        return lp, ent

    lps, ents = [], []
    for s in range(0, hidden.shape[0], rows):
        h, t = hidden[s : s + rows], targets[s : s + rows]  # (n, H), (n,)
        lp, ent = checkpoint(chunk, h, t, use_reentrant=False) if grad else chunk(h, t)
        lps.append(lp)
        ents.append(ent)
    lp = torch.cat(lps)  # (N,)
    if not with_entropy:
        return lp, None
    ent = torch.cat(ents)  # (N,)
    return lp, (ent if entropy_grad else ent.detach())


def _parameters(head) -> list[torch.nn.Parameter]:
    return list(head.parameters()) if isinstance(head, torch.nn.Module) else []
