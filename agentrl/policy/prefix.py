"""Shared prompt prefixes: encode the part every sequence of a batch starts with only once.

In a rollout or update batch every episode of a task starts with the same system turn (the
instructions and the tool schemas: ~400 tokens for the weather task, often more than half of
each sequence). ``prefix_cache`` runs the model on that prefix once (batch 1) and repeats its
KV cache over the batch, so only the rest of each sequence is computed. The repeat is a
differentiable ``repeat_interleave``: gradients from every row flow back into the one prefix
computation, so a training forward through a shared prefix gives the same loss and gradients
as the plain forward.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

MIN_SHARED_PREFIX = 32  # shorter common prefixes are not worth a separate forward pass


def common_prefix_length(prompts: list[list[int]]) -> int:
    """Length of the longest token prefix all ``prompts`` share, leaving each at least one token."""
    limit = min(len(p) for p in prompts) - 1
    first = prompts[0]
    n = 0
    while n < limit and all(p[n] == first[n] for p in prompts):
        n += 1
    return n


def batch_prefix_length(input_ids: torch.Tensor, attention: torch.Tensor) -> int:
    """Common prefix length of right-padded rows (B, T), leaving each row at least one token."""
    same = (input_ids == input_ids[:1]).all(dim=0) & attention.bool().all(dim=0)  # (T,)
    n = int(same.long().cumprod(dim=0).sum())
    shortest = int(attention.sum(dim=1).min())
    return max(0, min(n, shortest - 1))


def hf_model(model: Any) -> Any:
    """The transformers model inside peft / adapter wrappers."""
    from transformers import PreTrainedModel

    seen = 0
    while not isinstance(model, PreTrainedModel) and seen < 8:
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        elif hasattr(model, "model"):
            model = model.model
        else:
            break
        seen += 1
    return model


def cache_kwarg(model: Any) -> str:
    """The forward keyword for a KV cache: ``cache`` (transformers >= 5.2x) or
    ``past_key_values`` (earlier releases)."""
    params = inspect.signature(hf_model(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def prefix_cache(model: Any, prefix: torch.Tensor, batch: int) -> dict[str, Any]:
    """Forward keyword arguments holding a KV cache of ``prefix`` (1, P), repeated ``batch``
    times. Built under the caller's grad mode: inside ``torch.no_grad`` for generation, with
    gradients for a training forward. A cache is consumed by one forward (it grows in place)."""
    return _prefix_forward(model, prefix, batch)[1]


def _prefix_forward(model: Any, prefix: torch.Tensor, batch: int) -> tuple[Any, dict[str, Any]]:
    """(the model's output on ``prefix`` (1, P), forward kwargs with its cache repeated)."""
    out = model(input_ids=prefix, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    cache.batch_repeat_interleave(batch)
    return out, {cache_kwarg(model): cache}


def suffix_logits(
    model: Any, input_ids: torch.Tensor, attention: torch.Tensor, prefix_len: int
) -> torch.Tensor:
    """Logits (B, T - P, V) at positions P..T-1 of right-padded rows (B, T) that share their
    first ``prefix_len`` = P tokens; the prefix is computed once."""
    b = input_ids.shape[0]
    kwargs = prefix_cache(model, input_ids[:1, :prefix_len], b)
    out = model(input_ids=input_ids[:, prefix_len:], attention_mask=attention, **kwargs)
    return out.logits


def suffix_hidden(
    decoder: Any,
    input_ids: torch.Tensor,
    attention: torch.Tensor,
    prefix_len: int,
    with_prefix: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Final hidden states of a transformer trunk (an HF base model without its LM head) over
    right-padded rows (B, T) sharing their first ``prefix_len`` = P tokens, the prefix computed
    once: (suffix (B, T - P, H) at positions P..T-1, prefix (1, P, H) or None).

    ``with_prefix``: also return the prefix's hidden states (the same for every row), e.g. for
    a value head; gradients through both reach the one prefix computation.
    """
    b = input_ids.shape[0]
    out, kwargs = _prefix_forward(decoder, input_ids[:1, :prefix_len], b)
    prefix = out.last_hidden_state if with_prefix else None  # (1, P, H)
    suffix = decoder(input_ids=input_ids[:, prefix_len:], attention_mask=attention, **kwargs)
    return suffix.last_hidden_state, prefix
