"""Load a policy (model + tokenizer): a local path, a hub id, a ``.gguf`` file, a packaged
model, or the local tiny model.

``"agentrl/tiny"`` builds (or reuses) the tiny model with ``build_tiny_model`` and needs no
network. A ``.gguf`` file, or a packaged model id such as ``"agentrl/smollm2-135m"``
(``agentrl.policy.packaged``), is converted once to a cached HF directory
(``agentrl.policy.gguf``). Any other id goes to ``from_pretrained`` (a local directory or a hub
id). ``chat_template`` (``model.chat_template``) may replace the tokenizer's template
(``agentrl.policy.templates``); the template must render tools, since every agent prompt lists
them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from agentrl.policy.gguf import cached_gguf_dir
from agentrl.policy.packaged import default_template_for, is_packaged, packaged_file
from agentrl.policy.templates import apply_chat_template, check_tool_template

__all__ = [
    "DTYPES",
    "check_tool_template",
    "load_policy",
    "load_tokenizer",
    "resolve_dtype",
    "resolve_model_dir",
    "save_policy",
    "saved_quantization",
]

DTYPES = ("auto", "float32", "bfloat16", "float16")
#: Text whose tokens show whether a loaded tokenizer splits like its own tokenizer.json
#: (numbers, JSON, a degree sign, and runs of spaces before a word and before a digit).
_SPLIT_PROBE = (
    'It is 4821 * 377 = 1817517 in Buenos Aires, {"city": "Paris"} -7\u00b0C.\n  x\n    42'
)


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """``auto`` is fp32 on CPU and bf16 on an accelerator."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype == "auto":
        return torch.float32 if str(device).startswith("cpu") else torch.bfloat16
    return getattr(torch, dtype)


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer at ``path`` (a local directory or a hub id), split exactly as it was saved.

    ``AutoTokenizer`` builds the tokenizer class of the model type (``Qwen2Tokenizer`` for a
    Qwen2 model), and in transformers 5 that class installs its own pre-tokenizer over the one
    in ``tokenizer.json``. For a real Qwen checkpoint the two agree; for a tokenizer trained
    with another split (the tiny model's keeps numbers and words whole) they do not, and the
    model would see ids it was never trained on ("48", "21" became "4", "8", "2", "1"). When a
    local ``tokenizer.json`` splits a probe text differently, it is loaded as saved instead.
    """
    tokenizer = AutoTokenizer.from_pretrained(path)
    saved = Path(path) / "tokenizer.json"
    if saved.is_file():
        as_saved = Tokenizer.from_file(str(saved)).encode(_SPLIT_PROBE).ids
        if tokenizer(_SPLIT_PROBE, add_special_tokens=False)["input_ids"] != as_saved:
            tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    return tokenizer


def resolve_model_dir(model_id_or_path: str) -> str | Path:
    """The HF directory (or hub id) ``model_id_or_path`` loads from, built or converted first.

    ``agentrl/tiny``: the cached tiny build (``agentrl/tiny-moe``: its Mixture-of-Experts
    upcycling, ``agentrl.tiny.moe``). A packaged id: its distribution's ``.gguf``,
    converted (``PackageMissingError``, an ImportError, when not installed). A path ending in
    ``.gguf``: that file, converted. Anything else is returned as given.
    """
    from agentrl.tiny.builder import TINY_MODEL_ID, build_tiny_model
    from agentrl.tiny.moe import TINY_MOE_ID, build_tiny_moe

    if model_id_or_path == TINY_MODEL_ID:
        return build_tiny_model()
    if model_id_or_path == TINY_MOE_ID:  # the tiny model upcycled to a Mixture of Experts
        return build_tiny_moe()
    if is_packaged(model_id_or_path):
        gguf_path = packaged_file(model_id_or_path)
        return cached_gguf_dir(gguf_path, default_template_for(gguf_path))
    if model_id_or_path.lower().endswith(".gguf"):
        return cached_gguf_dir(model_id_or_path, default_template_for(model_id_or_path))
    return model_id_or_path


def load_policy(
    model_id_or_path: str,
    *,
    dtype: str = "auto",
    device: str = "cpu",
    chat_template: str = "auto",
    trainable: bool = False,
) -> tuple[Any, Any]:
    """(model, tokenizer) for any ``model.name`` (see ``resolve_model_dir``); model in eval mode.

    ``chat_template``: ``auto`` (the tokenizer's own), ``qwen2.5`` or a Jinja file's path.
    A quantized export (``agentrl export --quantize``) loads for decoding only: ``trainable``
    makes it an error naming the directory; an int8 one decodes with PyTorch's dynamic int8
    kernels on a CPU (``agentrl.export.quantize.fast_int8_linears``).
    """
    torch_dtype = resolve_dtype(dtype, device)
    path = resolve_model_dir(model_id_or_path)
    quantized = saved_quantization(path)
    if quantized and trainable:
        raise ValueError(
            f"model.name {model_id_or_path!r} is a quantized export ({quantized}): it serves "
            "and evaluates but cannot train; train from the full-precision run or model"
        )
    tokenizer = load_tokenizer(path)
    apply_chat_template(tokenizer, chat_template, model_id_or_path)
    check_tool_template(tokenizer, model_id_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if quantized:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, device_map=device)
        if str(device).startswith("cpu"):
            from agentrl.export.quantize import fast_int8_linears

            model = fast_int8_linears(model)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        model.to(device)
    model.eval()
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def saved_quantization(path: str | Path) -> str | None:
    """The ``quant_method`` a saved model directory was quantized with (None: not quantized,
    or not a local directory)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    spec = json.loads(config.read_text()).get("quantization_config") or {}
    return spec.get("quant_method") or None


def save_policy(model: Any, tokenizer: Any, path: str | Path) -> Path:
    """Save model weights and tokenizer (with its chat template) to ``path``."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
