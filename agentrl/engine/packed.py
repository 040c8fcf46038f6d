"""Linear layers of the decoding copy with their weights pre-packed by oneDNN (CPU, bf16).

``torch.nn.functional.linear`` in bf16 on a CPU re-lays out its weight for oneDNN's AMX /
AVX512-BF16 kernels on every call. The decoding copy's weights change only when it is
refreshed, so ``pack_linears`` swaps each ``nn.Linear`` for a ``PackedLinear`` that lays its
weight out once (``repack`` after a refresh). Measured on a 2-core AMX CPU at SmolLM2-135M's
shapes: a 16-row product 115 -> 75 us, a 64-row one 164 -> 107 us; a prefill-sized one is
unchanged. The ops are PyTorch's own (``torch.ops.mkldnn``, what its compiler uses when it
freezes a CPU model); where they are missing or disagree with ``F.linear`` on a probe,
nothing is swapped.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

PACK_HINT = 64  # the row count oneDNN lays the weight out for (any count works)


def _ops() -> Any | None:
    ops = getattr(torch.ops, "mkldnn", None)
    try:
        return ops if ops._reorder_linear_weight and ops._linear_pointwise else None
    except (AttributeError, RuntimeError):
        return None


class PackedLinear(torch.nn.Module):
    """An inference-only ``nn.Linear`` (same ``weight`` / ``bias`` parameters) computing
    with a pre-packed copy of its weight."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.repack()

    @torch.no_grad()
    def repack(self) -> None:
        """Lay out the current weight again (after its values changed)."""
        self._packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), PACK_HINT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")


def packing_works(dtype: torch.dtype) -> bool:
    """Whether packed products exist here and match ``F.linear`` on a probe."""
    if _ops() is None:
        return False
    try:
        gen = torch.Generator().manual_seed(0)
        w = torch.randn(96, 64, generator=gen).to(dtype)
        x = torch.randn(5, 3, 64, generator=gen).to(dtype)
        layer = torch.nn.Linear(64, 96, bias=False, dtype=dtype)
        layer.weight.data.copy_(w)
        got, want = PackedLinear(layer)(x).float(), F.linear(x, w).float()
    except RuntimeError:
        return False
    return got.shape == want.shape and bool(torch.allclose(got, want, rtol=0.02, atol=0.05))


def pack_linears(model: torch.nn.Module) -> int:
    """Swap every plain ``nn.Linear`` of a CPU bf16 ``model`` (used only for inference) for a
    ``PackedLinear``; returns how many were swapped (0 where packing is not available)."""
    params = list(model.parameters())
    if not params or params[0].device.type != "cpu" or params[0].dtype != torch.bfloat16:
        return 0
    if not packing_works(torch.bfloat16):
        return 0
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear and child.weight.dtype == torch.bfloat16:
                setattr(parent, name, PackedLinear(child))
                swapped += 1
    return swapped


def repack_linears(model: torch.nn.Module) -> None:
    """Re-lay out every ``PackedLinear`` of ``model`` (its weights were just refreshed)."""
    for module in model.modules():
        if isinstance(module, PackedLinear):
            module.repack()
