"""A preallocated KV cache of fixed slots, one sequence per slot, kept across turns.

``SlotKV`` holds, per layer, keys and values of shape (S, H_kv, C, D): S slots, C positions.
Each slot has its own length; a forward writes its new tokens at each row's own positions and
attends to everything before them. It plugs into a transformers decoder as its cache (only
``update`` is called when the forward gets explicit ``position_ids`` and a 4D mask, which
``prepare`` builds), so the model code is the model's own.

A forward runs over ``rows`` (slot indices). When the rows are the leading slots
0..n-1, the cache handed to attention is a view (no copy); otherwise those rows' caches are
gathered for that forward (prefill of a few rows).
"""

from __future__ import annotations

from typing import Any

import torch


def kv_shape(model: Any) -> tuple[int, int, int]:
    """(layers, key/value heads, head dim) of a transformers decoder (possibly peft-wrapped),
    from its config."""
    cfg = model.config
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return int(cfg.num_hidden_layers), int(heads), int(dim)


class SlotKV:
    """Keys and values of ``slots`` sequences of up to ``capacity`` tokens each."""

    is_compileable = False

    def __init__(self, model: Any, slots: int, capacity: int, dtype: torch.dtype) -> None:
        layers, heads, dim = kv_shape(model)
        device = next(model.parameters()).device
        shape = (slots, heads, capacity + 1, dim)  # (S, H_kv, C + scratch, D)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.length = torch.zeros(slots, dtype=torch.long)  # (S,) tokens cached per slot
        self.slots, self.capacity, self.device = slots, capacity, device
        self._rows = torch.arange(0)
        self._write = torch.zeros(0, 0, dtype=torch.long)
        self._span = 0
        self._view = True

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def prepare(self, rows: list[int], counts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Get ready for a forward of ``counts[i]`` new tokens in slot ``rows[i]``, right
        padded to the largest count (a row with 0 rides along as padding). Padding entries are
        written to a scratch column past the capacity, never over a real position. Returns
        (position_ids (B, Q), attention mask (B, 1, Q, span) bool) for the forward."""
        q = max(1, max(counts))
        start = self.length[rows]  # (B,)
        n = torch.tensor(counts, dtype=torch.long)  # (B,)
        if int((start + n).max()) > self.capacity:
            raise ValueError(f"KV cache capacity {self.capacity} exceeded")
        offsets = torch.arange(q)  # (Q,)
        real = offsets[None, :] < n[:, None]  # (B, Q)
        pos = start[:, None] + offsets[None, :]  # (B, Q) position of each new token
        pos = torch.where(real, pos, start[:, None])  # padding: any valid position
        self._rows = torch.tensor(rows, dtype=torch.long, device=self.device)
        self._write = torch.where(real, pos, self.capacity).to(self.device)  # scratch column
        self._span = max(1, int((start + n).max()))
        self._view = rows == list(range(len(rows)))
        keys = torch.arange(self._span)  # (span,)
        mask = keys[None, None, :] <= pos[:, :, None]  # (B, Q, span) causal within each row
        mask[:, :, 0] = True  # a padding query of an empty row attends to something
        return pos.to(self.device), mask[:, None].to(self.device)

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        """Write the forward's new keys/values (B, H, Q, D); return all of them up to ``span``."""
        k_buf, v_buf = self.keys[layer_idx], self.values[layer_idx]
        rows = self._rows[:, None].expand_as(self._write)  # (B, Q)
        k_buf[rows, :, self._write] = key_states.transpose(1, 2).to(k_buf.dtype)  # (B, Q, H, D)
        v_buf[rows, :, self._write] = value_states.transpose(1, 2).to(v_buf.dtype)
        if self._view:
            n = len(self._rows)
            return k_buf[:n, :, : self._span], v_buf[:n, :, : self._span]
        return (k_buf[:, :, : self._span].index_select(0, self._rows),
                v_buf[:, :, : self._span].index_select(0, self._rows))  # fmt: skip

    def advance(self, rows: list[int], counts: list[int]) -> None:
        """The forward's real tokens (``counts`` per row, padding not included) are cached."""
        self.length[rows] += torch.tensor(counts, dtype=torch.long)

    def copy_prefix(self, src: SlotKV, src_slot: int, dst_slot: int, n: int) -> None:
        """Slot ``dst_slot`` starts with the first ``n`` cached tokens of ``src``'s slot."""
        for mine, theirs in ((self.keys, src.keys), (self.values, src.values)):
            for a, b in zip(mine, theirs, strict=True):
                a[dst_slot, :, :n] = b[src_slot, :, :n]
        self.length[dst_slot] = n

    def move(self, src_slot: int, dst_slot: int) -> None:
        """Move a slot's cache to another slot (keeps the used slots packed at the front)."""
        self.copy_prefix(self, src_slot, dst_slot, int(self.length[src_slot]))
        self.length[src_slot] = 0

    def clear(self, slot: int) -> None:
        self.length[slot] = 0

    # What a transformers decoder may ask of its cache.
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return int(self.length.max())

    def __len__(self) -> int:
        return len(self.keys)
