"""Load a policy (model + tokenizer) from a local path, the HF hub, or the local tiny model.

``"agentrl/tiny"`` builds (or reuses) the tiny model with ``build_tiny_model`` and needs no
network; any other id goes to ``from_pretrained`` (a local directory or a hub id). The
tokenizer's chat template must render tools, since every agent prompt lists them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from agentrl.chat.render import render_text

DTYPES = ("auto", "float32", "bfloat16", "float16")
#: Text whose tokens show whether a loaded tokenizer splits like its own tokenizer.json.
_SPLIT_PROBE = 'It is 4821 * 377 = 1817517 in Buenos Aires, {"city": "Paris"} -7\u00b0C.\n  x'

_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "agentrl_probe_tool",
        "description": "A probe.",
        "parameters": {
            "type": "object",
            "properties": {"x": {"type": "string"}},
            "required": ["x"],
        },
    },
}


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """``auto`` is fp32 on CPU and bf16 on an accelerator."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype == "auto":
        return torch.float32 if str(device).startswith("cpu") else torch.bfloat16
    return getattr(torch, dtype)


def check_tool_template(tokenizer: Any, name: str) -> None:
    """Raise ValueError unless the tokenizer's chat template renders a tool schema."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{name}: tokenizer has no chat template; a template with tools is needed")
    msgs = [{"role": "user", "content": "hi"}]
    try:
        text = render_text(tokenizer, msgs, [_PROBE_TOOL], add_generation_prompt=True)
    except Exception as e:  # a template that chokes on tools
        raise ValueError(f"{name}: chat template failed to render tools ({e})") from e
    if "agentrl_probe_tool" not in text:
        raise ValueError(
            f"{name}: the chat template doesn't support tools (a tool's name is not rendered); "
            "use a tool-calling model (e.g. Qwen2.5-Instruct) or 'agentrl/tiny'"
        )


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


def load_policy(
    model_id_or_path: str, *, dtype: str = "auto", device: str = "cpu"
) -> tuple[Any, Any]:
    """(model, tokenizer) for a path, a hub id, or ``"agentrl/tiny"``; model in eval mode."""
    from agentrl.tiny.builder import TINY_MODEL_ID, build_tiny_model

    torch_dtype = resolve_dtype(dtype, device)
    path: str | Path = model_id_or_path
    if model_id_or_path == TINY_MODEL_ID:
        path = build_tiny_model()
    tokenizer = load_tokenizer(path)
    check_tool_template(tokenizer, model_id_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    model.to(device)
    model.eval()
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def save_policy(model: Any, tokenizer: Any, path: str | Path) -> Path:
    """Save model weights and tokenizer (with its chat template) to ``path``."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
