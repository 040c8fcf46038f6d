"""Choosing the next token of each row from its logits: greedy, or temperature and top-p with
each row's own random stream, and the chosen token's log-prob. Pure functions of tensors.

Each sequence samples from its own ``torch.Generator``, so what an episode samples does not
depend on which other episodes share its decode step (continuous batching reorders them).
"""

from __future__ import annotations

import torch


def nucleus_filter(scaled: torch.Tensor, top_p: float) -> torch.Tensor:
    """Logits (B, V) with every token outside the top-p nucleus set to -inf (the most likely
    token is always kept)."""
    if top_p >= 1.0:
        return scaled
    sorted_logits, order = scaled.sort(dim=-1, descending=True)  # (B, V)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # (B, V) mass of the tokens ranked above
    drop_sorted = before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return scaled.masked_fill(drop, float("-inf"))


def gumbel_noise(generators: list[torch.Generator], vocab: int) -> torch.Tensor:
    """Gumbel(0, 1) noise (B, V), row i drawn from ``generators[i]``."""
    u = torch.stack([torch.rand(vocab, generator=g) for g in generators])  # (B, V)
    return -torch.log(-torch.log(u.clamp_(1e-20, 1.0 - 1e-7)))


def choose_tokens(
    logits: torch.Tensor,
    generators: list[torch.Generator] | None,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids (B,), log-probs (B,)) from next-token logits (B, V).

    ``generators`` None = greedy (log-probs at temperature 1). Otherwise a sample from
    softmax(logits / temperature) restricted to the top-p nucleus (Gumbel-max with each row's
    own noise); its log-prob is under the temperature-scaled distribution before the nucleus
    cut, as the trainer's forward computes it.
    """
    logits = logits.float()
    if generators is None:
        logp = torch.log_softmax(logits, dim=-1)  # (B, V)
        ids = logits.argmax(dim=-1)  # (B,)
    else:
        scaled = logits / temperature
        logp = torch.log_softmax(scaled, dim=-1)
        noise = gumbel_noise(generators, logits.shape[-1]).to(logits.device)
        ids = (nucleus_filter(scaled, top_p) + noise).argmax(dim=-1)
    return ids, logp.gather(-1, ids[:, None]).squeeze(-1)
