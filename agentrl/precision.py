"""Mixed precision: ``train.autocast`` resolved to a dtype, and the autocast context that the
update, the reference pass and the warm start run under."""

from __future__ import annotations

import contextlib

import torch

from agentrl.machine import native_bf16


def autocast_dtype(mode: str, device: str) -> torch.dtype | None:
    """``off``: None. ``bf16``: bfloat16. ``auto``: bfloat16 where bf16 matrix products are
    native (``agentrl.machine.native_bf16``: a CUDA device that supports it, a CPU with
    AMX-BF16 or AVX512-BF16), else None."""
    if mode == "off":
        return None
    if mode == "bf16":
        return torch.bfloat16
    if mode == "auto":
        return torch.bfloat16 if native_bf16(device) else None
    raise ValueError(f"config field 'train.autocast' must be 'auto', 'off' or 'bf16', got {mode!r}")


def autocast(device: torch.device | str, dtype: torch.dtype | None):
    """A ``torch.autocast`` context for ``dtype``, or a no-op when it is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)
