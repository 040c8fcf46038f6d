"""``algo.micro_batch_tokens: auto``: a micro-batch token budget from free memory and the
model's shapes, so that a default run's update stays well inside the machine's memory.

Estimate (fp32 autograd of a Llama/Qwen-style decoder, per token of a micro-batch):

    per_token = b * (L * (9 H + 2 H_kv + 4 I) + head)      (b = activation bytes: 4, or 2 in bf16)

- per layer: the two RMSNorms keep input, normalized and scaled copies (3 H each), attention
  keeps rotated q (H), k and v (H_kv each), its output and the o_proj input (2 H), the MLP
  keeps gate, SiLU(gate), up and their product (4 I). With SDPA (the default) no T x T
  scores are kept; eager attention adds 2 * heads * T per layer. Gradient checkpointing
  keeps H per layer and recomputes one layer at a time: L * H + (9 H + 2 H_kv + 4 I).
- head: the chunked LM head keeps 6 H (hidden copies and their gradients); full logits
  keep about 4 V (logits, scaled, log-softmax, their gradient).

Measured on this machine (fp32, 2 cores, peak RSS of one forward + backward): the tiny model
(L=3, H=192, I=768) 63 KB per token (formula: 62 KB); SmolLM2-135M's shapes (L=30, H=576,
H_kv=192, I=1536) 1.13 MB per token (formula: 1.40 MB, on the safe side).

Fixed costs come first: ``fixed = 5 * chunk logits + 2 * parameter bytes (gradient
temporaries) + trainable bytes * (1 gradient + 2 Adam moments not yet allocated)``. Then

    budget = (fraction * available - fixed) / per_token,  fraction = 0.5,

rounded down to a power of sqrt(2) (512, 724, 1024, ..., 5792, 8192, ...) and clamped to
[512, 16384] tokens. The rounding keeps the budget (and so the micro-batching, and the
floating-point sums of a resumed run) the same when the free memory moves a little between
runs; the ceiling keeps the peak flat as episodes per step grow: past it a bigger micro-batch
holds more memory without running faster (on CPU a micro-batch of 16k tokens already makes
every matmul large; bench/peak_memory.py measures the update).
"""

from __future__ import annotations

import logging
import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.algos import forward
from agentrl.engine.kv import kv_shape
from agentrl.machine import available_memory
from agentrl.policy.logprobs import chunk_rows

log = logging.getLogger(__name__)
FRACTION = 0.5
MIN_BUDGET = 512
MAX_BUDGET = 16_384
EAGER_SEQ = 4096  # sequence length assumed for eager attention's T x T scores


@dataclass(frozen=True)
class ModelShape:
    """What the activation estimate needs to know about a decoder."""

    layers: int
    hidden: int
    kv_hidden: int  # key/value width: kv_heads * head_dim
    intermediate: int
    heads: int
    vocab: int
    params: int  # all parameters
    trainable: int  # parameters that train (LoRA: the adapters)
    eager_attention: bool = False


def model_shape(model: Any) -> ModelShape:
    """The ``ModelShape`` of an HF causal LM (possibly peft-wrapped), from its config."""
    config = model.config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = int(config.hidden_size)
    heads = int(config.num_attention_heads)
    layers, kv_heads, head_dim = kv_shape(model)
    params = list(model.parameters())
    return ModelShape(
        layers=layers,
        hidden=hidden,
        kv_hidden=kv_heads * head_dim,
        intermediate=int(getattr(config, "intermediate_size", None) or 4 * hidden),
        heads=heads,
        vocab=int(config.vocab_size),
        params=sum(p.numel() for p in params),
        trainable=sum(p.numel() for p in params if p.requires_grad),
        eager_attention=getattr(config, "_attn_implementation", None) == "eager",
    )


def activation_bytes_per_token(
    s: ModelShape, *, chunked: bool = True, checkpointing: bool = False, act_bytes: int = 4
) -> int:
    """Bytes a training forward + backward keeps per token (the module docstring's formula)."""
    layer = 9 * s.hidden + 2 * s.kv_hidden + 4 * s.intermediate
    if s.eager_attention:
        layer += 2 * s.heads * EAGER_SEQ
    trunk = s.layers * s.hidden + layer if checkpointing else s.layers * layer
    head = 6 * s.hidden if chunked else 4 * s.vocab
    return act_bytes * (trunk + head)


def fixed_bytes(s: ModelShape, *, optimizer_ready: bool, param_bytes: int = 4) -> int:
    """Memory an update needs whatever its micro-batch size (the module docstring)."""
    chunk = 5 * chunk_rows(s.vocab) * s.vocab * 4
    moments = 0 if optimizer_ready else 2 * s.trainable * 4
    return chunk + 2 * s.params * param_bytes + s.trainable * 4 + moments


def auto_token_budget(
    available: int, per_token: int, fixed: int, fraction: float = FRACTION
) -> int:
    """Padded tokens per micro-batch: ``(fraction * available - fixed) / per_token`` rounded
    down to a power of sqrt(2), within ``[MIN_BUDGET, MAX_BUDGET]``."""
    fits = (fraction * available - fixed) / max(per_token, 1)
    if fits < MIN_BUDGET:
        return MIN_BUDGET
    budget = int(2 ** (math.floor(2 * math.log2(fits) + 1e-9) / 2))
    return min(MAX_BUDGET, max(MIN_BUDGET, budget))


_resolved: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def resolve_token_budget(
    setting: int | str,
    model: Any,
    optimizer: torch.optim.Optimizer | None = None,
    amp_dtype: torch.dtype | None = None,
) -> int:
    """``algo.micro_batch_tokens`` as a number: an int as it is (0 = no limit); ``auto``
    estimated once per model (the first update) from the memory free then and the shapes.

    ``optimizer``: whether its Adam moments still have to be allocated (counted if so). A
    model without an HF config cannot be estimated and gets no limit.
    """
    if setting != "auto":
        return int(setting)
    if model in _resolved:
        return _resolved[model]
    if not hasattr(model, "config"):
        log.info("micro_batch_tokens=auto: %s has no config to estimate from; no limit",
                 type(model).__name__)  # fmt: skip
        _resolved[model] = 0
        return 0
    s = model_shape(model)
    param = next(model.parameters())
    act = 2 if (amp_dtype is not None or param.element_size() == 2) else 4
    chunked = forward.CHUNKED_HEAD and not isinstance(forward.lm_parts(model), str)
    checkpointing = forward.activation_checkpointing(model)
    per_token = activation_bytes_per_token(s, chunked=chunked, checkpointing=checkpointing,
                                           act_bytes=act)  # fmt: skip
    ready = optimizer is not None and len(optimizer.state) > 0
    fixed = fixed_bytes(s, optimizer_ready=ready, param_bytes=param.element_size())
    free = available_memory(param.device)
    budget = auto_token_budget(free, per_token, fixed)
    log.info("micro_batch_tokens=auto: %d tokens (%.1f GiB free, %.0f KiB per token, "
             "%.2f GiB fixed)", budget, free / 2**30, per_token / 1024, fixed / 2**30)  # fmt: skip
    _resolved[model] = budget
    return budget
