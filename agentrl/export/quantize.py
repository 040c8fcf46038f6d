"""Weight quantization for serving on a CPU: int8 (torchao) and 4-bit NF4 (bitsandbytes).

An export is written in the formats transformers already loads: ``int8`` is torchao's
int8 weight-only scheme (per output channel, symmetric), ``nf4`` is bitsandbytes' 4-bit
NormalFloat. Each saves its ``quantization_config`` into ``config.json``, so the directory
loads with a plain ``from_pretrained`` wherever the library is installed.

torchao's int8 weight-only kernel dequantizes on a CPU and decodes no faster than fp32, so
``load_policy`` hands an int8 export's linear layers to PyTorch's dynamic int8 kernels
(``fast_int8_linears``: the same int8 weights, the activations quantized per call), which use
the CPU's integer dot products: SmolLM2-135M decodes 2.9x faster than fp32 with one row and
3.2x with eight (``bench/export.py``).

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
    """``int8``, ``nf4``, ``int8-dynamic`` (after ``fast_int8_linears``) or ``none``."""
    for module in model.modules():
        name = type(module).__module__
        if name.startswith("torch.ao.nn.quantized"):
            return "int8-dynamic"
        if name.startswith("bitsandbytes"):
            return "nf4"
        weight = getattr(module, "weight", None)
        if weight is not None and type(weight).__module__.startswith("torchao"):
            return "int8"
    return "none"


def is_quantized(model: Any) -> bool:
    """Whether ``model``'s weights are quantized (it can decode but not train)."""
    return quantization_kind(model) != "none"


def fast_int8_linears(model: Any) -> Any:
    """``model`` (an int8 export) with every linear layer on PyTorch's dynamic int8 kernels.

    torchao's int8 values are dequantized and quantized again per output channel (symmetric),
    so those weights stay on the grid they were exported on, up to a rescale of each channel;
    a linear layer the export kept in full precision (a head tied to the embeddings) is
    quantized the same way. A model without torchao weights is returned unchanged.
    """
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    targets = []
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and type(module.weight).__module__.startswith(
            "torchao"
        ):
            targets.append(module)
    if not targets:
        return model
    for module in targets:
        dense = module.weight.dequantize().to(torch.float32)  # (out, in)
        module.weight = torch.nn.Parameter(dense, requires_grad=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's notice that its eager API moves to torchao
        return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig},
                                inplace=True)  # fmt: skip
