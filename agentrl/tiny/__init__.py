"""The tiny local model: vocabulary, synthetic corpus, hand-wired copy heads, builder, and
its Mixture-of-Experts upcycling (``build_tiny_moe``, ``TINY_MOE_ID``).

``build_tiny_model()`` builds (or reuses) it; ``TINY_MODEL_ID`` (``"agentrl/tiny"``) names it
wherever a model id is accepted. The names below are loaded on first use (PEP 562), so
importing a light submodule (``agentrl.tiny.vocab``, ``agentrl.tiny.corpus``) does not pull
in torch and transformers through this package.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "MARKER": "lock",
    "MODEL_CONFIG": "builder",
    "TINY_MODEL_ID": "builder",
    "TINY_MOE_ID": "moe",
    "TINY_VERSION": "builder",
    "build_tiny_model": "builder",
    "build_tiny_moe": "moe",
    "corpus_texts": "builder",
    "default_tiny_dir": "builder",
    "is_complete": "lock",
    "make_model": "builder",
    "train_tokenizer": "builder",
    "make_corpus": "corpus",
    "make_drills": "corpus",
    "build_lock": "lock",
    "remove_stale_temps": "lock",
    "vocabulary_texts": "vocab",
    "wire_copy_heads": "wiring",
    "upcycle": "moe",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'agentrl.tiny' has no attribute {name!r}")
    module = importlib.import_module(f"agentrl.tiny.{_EXPORTS[name]}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
