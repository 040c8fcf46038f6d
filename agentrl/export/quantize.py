"""Weight quantization for serving on a CPU: int8 (torchao) and 4-bit NF4 (bitsandbytes).

An export is written in the formats transformers already loads: ``int8`` is torchao's
int8 weight-only scheme (per output channel, symmetric), ``nf4`` is bitsandbytes' 4-bit
NormalFloat. Each saves its ``quantization_config`` into ``config.json``, so the directory
loads with a plain ``from_pretrained`` wherever the library is installed.

torchao's int8 tensors dequantize on every call on a CPU and decode no faster than fp32, so
``load_policy`` moves an int8 export's linear layers onto PyTorch's weight-only int8 kernel
(``fast_int8_linears``: the same int8 values and scales, bf16 activations) where bf16 is
native; figures in ``bench/README.md`` (``bench/export.py``).

The libraries are optional (``pip install 'agentrl[quant]'``) and imported only here.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

#: ``--quantize`` choices: none (full precision), int8, nf4.
QUANTIZE_CHOICES = ("none", "int8", "nf4")


class QuantizationUnavailable(ImportError):
    """The library a quantization needs is not installed."""


def _import_torchao() -> Any:
    # torchao tries to load its CUDA kernels at import and logs each failure on a CPU machine.
    logging.getLogger("torchao").setLevel(logging.ERROR)
    try:
        import torchao.quantization as quantization
    except ImportError as e:
        raise QuantizationUnavailable(
            "int8 export needs torchao: pip install 'agentrl[quant]'"
        ) from e
    return quantization


def quantization_config(kind: str) -> Any:
    """The transformers ``quantization_config`` that loads a model quantized as ``kind``."""
    if kind == "int8":
        from transformers import TorchAoConfig

        return TorchAoConfig(_import_torchao().Int8WeightOnlyConfig())
    if kind == "nf4":
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as e:
            raise QuantizationUnavailable(
                "nf4 export needs bitsandbytes: pip install 'agentrl[quant]'"
            ) from e
        from transformers import BitsAndBytesConfig

        from agentrl.machine import native_bf16

        compute = torch.bfloat16 if native_bf16("cpu") else torch.float32
        return BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute
        )
    raise ValueError(f"quantize must be one of {QUANTIZE_CHOICES}, got {kind!r}")


def quantization_kind(model: Any) -> str:
    """``int8``, ``nf4`` or ``none`` (an int8 export after ``fast_int8_linears`` is int8)."""
    for module in model.modules():
        name = type(module).__module__
        if isinstance(module, Int8Linear):
            return "int8"
        if name.startswith("bitsandbytes"):
            return "nf4"
        weight = getattr(module, "weight", None)
        if weight is not None and type(weight).__module__.startswith("torchao"):
            return "int8"
    return "none"


def is_quantized(model: Any) -> bool:
    """Whether ``model``'s weights are quantized (it can decode but not train)."""
    return quantization_kind(model) != "none"


class Int8Linear(torch.nn.Module):
    """A linear layer with int8 weights (per output channel, symmetric) that multiplies on
    PyTorch's weight-only int8 CPU kernel: activations in bf16, no activation quantization."""

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        # (out, in) int8, copied: a tensor read from safetensors may sit unaligned in the
        # file's mapping, and the kernel faults on such memory
        self.register_buffer("qdata", qdata.detach().clone(memory_format=torch.contiguous_format))
        self.register_buffer("scale", scale.reshape(-1).to(torch.bfloat16))  # (out,)
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach(), False)
        self.in_features, self.out_features = qdata.shape[1], qdata.shape[0]

    @classmethod
    def from_dense(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> Int8Linear:
        """Quantize a dense (out, in) weight: scale = max |w| of the channel / 127."""
        w = weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0  # (out,)
        qdata = (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
        return cls(qdata, scale, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()
        y = torch._weight_int8pack_mm(flat, self.qdata, self.scale)
        y = y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        return y if self.bias is None else y + self.bias


def _int8_parts(weight: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(int8 values (out, in), scales (out,)) of a torchao int8 weight, else None."""
    if not type(weight).__module__.startswith("torchao"):
        return None
    qdata, scale = getattr(weight, "qdata", None), getattr(weight, "scale", None)
    if qdata is None or scale is None or qdata.dtype != torch.int8 or qdata.dim() != 2:
        return None
    if scale.numel() != qdata.shape[0]:  # not one scale per output channel
        return None
    return qdata, scale.reshape(-1)


def fast_int8_linears(model: Any) -> Any:
    """``model`` (an int8 export) decoding on the CPU's fast int8 path, in place.

    Where bf16 matmuls are native, every torchao int8 linear layer becomes an ``Int8Linear``
    with the same int8 values and scales, and a head the export kept in full precision (tied
    to the embeddings) is quantized the same way. Elsewhere the int8 weights are dequantized
    once to fp32 (torchao would dequantize them on every call). A model without torchao
    weights is returned unchanged.

    Activations are not quantized: PyTorch's dynamic int8 linear layers (8-bit activations
    per tensor) decoded as fast but took SmolLM2's weather success from 0.26 to 0.00.
    """
    from agentrl.machine import native_bf16

    swaps = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, torch.nn.Linear) and _int8_parts(child.weight) is not None:
                swaps.append((parent, name, child))
    if not swaps:
        return model
    fast = native_bf16("cpu")
    for parent, name, child in swaps:
        qdata, scale = _int8_parts(child.weight)
        if fast:
            setattr(parent, name, Int8Linear(qdata, scale, child.bias))
        else:
            dense = qdata.float() * scale.float()[:, None]  # (out, in)
            child.weight = torch.nn.Parameter(dense, requires_grad=False)
    head = getattr(model, "lm_head", None)
    if fast and isinstance(head, torch.nn.Linear):
        model.lm_head = Int8Linear.from_dense(head.weight, head.bias)
    return model
