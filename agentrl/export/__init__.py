"""Export a trained policy as a Hugging Face model directory, optionally quantized (int8, nf4)
for CPU serving: ``agentrl export RUN_DIR --out DIR --quantize int8``.

Names load lazily, so ``agentrl.cli`` can register the command without importing torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "MANIFEST": "agentrl.export.export",
    "export_model": "agentrl.export.export",
    "QUANTIZE_CHOICES": "agentrl.export.quantize",
    "QuantizationUnavailable": "agentrl.export.quantize",
    "fast_int8_linears": "agentrl.export.quantize",
    "is_quantized": "agentrl.export.quantize",
    "quantization_kind": "agentrl.export.quantize",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'agentrl.export' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
