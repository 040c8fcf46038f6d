"""A lower-precision copy of the policy for decoding (``rollout.dtype``).

Where bf16 matrix products are native (a CPU with AMX-BF16 or AVX512-BF16, most GPUs), a bf16
copy of an fp32 policy decodes 1.5x (one token per row) to 2.5x (prefill) faster and holds a
KV cache half the size. Only the parameters are cast: buffers such as the rotary inverse
frequencies stay fp32, so positions keep their precision. ``refresh`` copies the policy's
current weights in (after every update); the copy never trains. On a CPU its linear layers
compute with weights pre-packed for oneDNN (``agentrl.engine.packed``).

A LoRA policy (a peft model) decodes from a plain copy with the adapters folded into its
weights (W + scale * B @ A, refreshed after every update): the same function without peft's
two extra small products per adapted layer and token (1.19x decode tokens/s on SmolLM2 with
rank 16 on every projection: bench/lora_decode.py).

Log-probs sampled from the copy differ from the policy's by rounding, so a trainer using it
recomputes the old log-probs of the PPO ratio with the policy itself (``agentrl.train.step``).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from agentrl.engine.packed import pack_linears, repack_linears
from agentrl.machine import native_bf16


def is_lora(model: Any) -> bool:
    """Whether ``model`` is a peft model (LoRA adapters on a frozen base)."""
    return hasattr(model, "peft_config") and hasattr(model, "merge_and_unload")


def make_shadow(model: Any, dtype: torch.dtype) -> Any:
    """A copy of ``model`` in eval mode whose floating-point parameters are ``dtype``; a plain
    model with the adapters merged where ``model`` is a LoRA policy."""
    shadow = copy.deepcopy(model).merge_and_unload() if is_lora(model) else copy.deepcopy(model)
    for p in shadow.parameters():
        p.requires_grad_(False)
        if p.is_floating_point():
            p.data = p.data.to(dtype)
    pack_linears(shadow)  # CPU bf16: weights laid out for oneDNN once (agentrl.engine.packed)
    return shadow.eval()


@torch.no_grad()
def refresh_shadow(shadow: Any, model: Any) -> None:
    """Copy ``model``'s current parameters into ``shadow`` (cast to its dtypes)."""
    if is_lora(model):
        merged = merged_parameters(model)
        for name, dst in shadow.named_parameters():
            dst.copy_(merged[name])
    else:
        for dst, src in zip(shadow.parameters(), model.parameters(), strict=True):
            dst.copy_(src)
    repack_linears(shadow)


def merged_parameters(peft_model: Any) -> dict[str, torch.Tensor]:
    """A LoRA policy's parameters as the merged plain model names them: each adapted layer's
    ``weight`` is its base weight plus the active adapters' deltas; the rest as they are."""
    base = peft_model.get_base_model()
    out: dict[str, torch.Tensor] = {}
    for name, p in base.named_parameters():
        if "lora_" not in name:
            out[name.replace(".base_layer.", ".")] = p
    for name, module in base.named_modules():
        if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
            weight = module.base_layer.weight
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
            out[f"{name}.weight"] = weight
    return out


def decode_dtype(mode: str, model: Any, device: str) -> torch.dtype | None:
    """``rollout.dtype`` resolved: None (decode the policy itself) or the dtype of a copy.
    ``auto``: bf16 for an fp32 policy where bf16 matmuls are native. A quantized model
    (``agentrl export --quantize``) always decodes itself."""
    from agentrl.export.quantize import is_quantized

    if is_quantized(model):
        return None
    own = next(model.parameters()).dtype
    if mode == "auto":
        return torch.bfloat16 if own == torch.float32 and native_bf16(device) else None
    wanted = getattr(torch, mode)
    return None if wanted == own else wanted
