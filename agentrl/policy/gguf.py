"""A ``.gguf`` file as a normal Hugging Face directory, converted once and cached.

transformers loads a GGUF (with the ``gguf`` and ``accelerate`` packages) and dequantizes it
to fp32, but the model it returns is marked "quantized with gguf" and refuses
``save_pretrained``, and the load takes ~25 s. So the first load builds a plain model from
the same config, copies the state dict into it and saves it, with the tokenizer, as
safetensors under ``$AGENTRL_CACHE/gguf/<stem>-<key>``; later loads read that in seconds.
The key covers the file's size, mtime and first MiB, so a changed file is converted again.

The cached tokenizer differs from transformers' GGUF tokenizer in three ways, each written
where it is done: the digit split llama.cpp's pre-tokenizer type asks for, ``<|endoftext|>``
as the pad token, and the chat template (its own when it renders tools, else the default).

Builds go through the tiny model's ``agentrl.tiny.lock.build_once``: one build at a time under
an exclusive lock, written to a temp directory, renamed into place, marker written last.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

from agentrl.chat.template import ENDOFTEXT
from agentrl.policy.templates import CHAT_TEMPLATES, has_chatml_tokens, renders_tools
from agentrl.tiny.lock import MARKER, build_once, cache_root, is_complete

__all__ = ["MARKER", "cache_root", "cached_gguf_dir", "convert_gguf", "is_complete"]

#: Bump when the conversion changes: every cached conversion is then rebuilt.
CONVERT_VERSION = "gguf-v1"
HEAD_BYTES = 1 << 20
#: Template for a GGUF with ChatML tokens whose own template ignores tools (and no default).
CHATML_FALLBACK = "qwen2.5"
#: llama.cpp pre-tokenizer types that split off every digit before the GPT-2 regex
#: (llama-vocab.cpp). transformers' GGUF tokenizer knows none of them and would apply the
#: GPT-2 regex alone, so "  42" became " ", " ", "4", "2" where the model was trained on
#: "  ", "4", "2" (HF's SmolLM2 tokenizer: Digits(individual) then ByteLevel).
DIGIT_SPLIT_PRE_TYPES = frozenset(
    {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
)


def file_key(path: Path, default_template: str | None) -> str:
    """Hex key of the conversion of ``path``: size, mtime, first MiB, default, version."""
    st = path.stat()
    with open(path, "rb") as fh:
        head = hashlib.sha256(fh.read(HEAD_BYTES)).hexdigest()
    parts = [CONVERT_VERSION, str(st.st_size), str(st.st_mtime_ns), head, str(default_template)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def cache_dir_for(path: Path, default_template: str | None = None) -> Path:
    """Where the conversion of ``path`` is cached."""
    return cache_root() / "gguf" / f"{path.stem}-{file_key(path, default_template)}"


def cached_gguf_dir(gguf_path: str | Path, default_template: str | None = None) -> Path:
    """The cached HF directory of ``gguf_path``, converting it first when needed.

    ``default_template``: the chat template (a ``CHAT_TEMPLATES`` name) stored when the file's
    own does not render tools; None falls back to ``CHATML_FALLBACK`` for ChatML tokenizers.
    """
    path = Path(gguf_path).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{gguf_path}: no such GGUF file")
    out = cache_dir_for(path, default_template)

    def write(tmp: Path) -> str:
        print(f"agentrl: converting {path.name} to a Hugging Face model in {out} (once)",
              file=sys.stderr)  # fmt: skip
        t0 = time.perf_counter()
        info = convert_gguf(path, tmp, default_template)
        info.update(source=str(path), seconds=round(time.perf_counter() - t0, 1))
        return json.dumps(info) + "\n"

    return build_once(out, write)


def convert_gguf(path: Path, out: Path, default_template: str | None = None) -> dict[str, Any]:
    """Write ``path`` as a plain HF model + tokenizer directory ``out``; return build info."""
    require_gguf_packages()
    tokenizer, template = gguf_tokenizer(path, default_template)
    model = gguf_model(path)
    tokenizer.model_max_length = model.config.max_position_embeddings
    pad_id = tokenizer.pad_token_id
    model.config.pad_token_id = pad_id
    model.generation_config.pad_token_id = pad_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"chat_template": template, "architecture": model.config.model_type}


def require_gguf_packages() -> None:
    """Raise ImportError naming the pip command unless ``gguf`` and ``accelerate`` import."""
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        need, names = " and ".join(missing), " ".join(missing)
        raise ImportError(f"loading a .gguf file needs {need}: pip install {names}")


def gguf_pre_type(path: Path) -> str | None:
    """The file's ``tokenizer.ggml.pre`` (llama.cpp's pre-tokenizer type), if any."""
    key = "tokenizer.ggml.pre"
    try:  # reads the header only (0.02 s); GGUFReader parses every array (4 s for SmolLM2)
        from transformers.integrations.gguf.reader import read_gguf_metadata
    except ImportError:
        from gguf import GGUFReader

        field = GGUFReader(str(path)).fields.get(key)
        return None if field is None else str(field.contents())
    value = read_gguf_metadata(str(path), ())[0].get(key)
    return None if value is None else str(value)


def gguf_tokenizer(path: Path, default_template: str | None = None) -> tuple[Any, str]:
    """The file's tokenizer as agentrl uses it, and which template it carries."""
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    if gguf_pre_type(path) in DIGIT_SPLIT_PRE_TYPES:
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    # pad = <|endoftext|> (as Qwen does) where the file pads with the eos token: anything that
    # masks by pad id would otherwise drop every <|im_end|> the model was trained to emit.
    end = tok(ENDOFTEXT, add_special_tokens=False)["input_ids"]
    pads_with_eos = tok.pad_token is None or tok.pad_token_id == tok.eos_token_id
    if pads_with_eos and len(end) == 1 and end[0] != tok.eos_token_id:
        tok.pad_token = ENDOFTEXT
    tok.clean_up_tokenization_spaces = False
    template = "own"
    if not renders_tools(tok):
        name = default_template or (CHATML_FALLBACK if has_chatml_tokens(tok) else None)
        if name is not None:
            tok.chat_template, template = CHAT_TEMPLATES[name], name
    return tok, template


def gguf_model(path: Path) -> Any:
    """A plain (saveable) fp32 model with the file's dequantized weights, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        from transformers import GgufConfig

        options: dict[str, Any] = {"quantization_config": GgufConfig(dequantize=True)}
    except ImportError:  # older transformers 5: GGUF weights are always dequantized
        options = {}
    loaded = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, **options
    )
    config = copy.deepcopy(loaded.config)
    for attr in ("quantization_config", "_model_name_or_path"):
        if hasattr(config, attr):
            delattr(config, attr)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = copy.deepcopy(loaded.generation_config)
    del loaded
    return model.eval()
