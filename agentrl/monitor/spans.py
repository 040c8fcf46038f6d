"""An episode's loss mask as runs of tokens, for the trajectory viewer: which text the policy
sampled (mask 1, trained on) and which it was given (mask 0: the prompt, tool results)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def mask_spans(
    token_ids: Sequence[int], loss_mask: Sequence[int], decode: Callable[[list[int]], str]
) -> list[dict[str, Any]]:
    """``[{"mask": 0 | 1, "tokens": n, "text": decoded}, ...]``: maximal runs of equal mask,
    in order; their token counts sum to ``len(token_ids)``."""
    if len(token_ids) != len(loss_mask):
        raise ValueError(f"{len(token_ids)} token ids but {len(loss_mask)} mask entries")
    spans: list[dict[str, Any]] = []
    start = 0
    for i in range(1, len(token_ids) + 1):
        if i == len(token_ids) or loss_mask[i] != loss_mask[start]:
            ids = list(token_ids[start:i])
            spans.append({"mask": int(loss_mask[start]), "tokens": len(ids), "text": decode(ids)})
            start = i
    return spans
