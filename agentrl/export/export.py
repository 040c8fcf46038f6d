"""``agentrl export``: a trained policy as a plain Hugging Face model directory.

The source is a run directory (its ``model/``, where a LoRA run already saved the adapters
merged into the base), a saved model, or any id ``load_policy`` knows (a packaged model, a
``.gguf`` file). ``weights="start"`` exports the policy as RL began (after the warm start).
The directory gets the tokenizer with its chat template, the run's ``config.yaml`` (so
``agentrl eval`` on it uses the run's task settings, as on the run) and ``agentrl_export.json``
(source, weights, quantization, size).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from agentrl.export.quantize import QUANTIZE_CHOICES, quantization_config
from agentrl.policy.loading import load_policy, save_policy, saved_quantization

MANIFEST = "agentrl_export.json"


def directory_bytes(path: Path) -> int:
    """Bytes of the weight files under ``path`` (safetensors and bin)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.suffix in (".safetensors", ".bin"))


def _check_out(out: Path, force: bool) -> None:
    if out.exists() and any(out.iterdir()) and not force:
        raise FileExistsError(f"--out {str(out)!r} exists and is not empty (use --force)")


def export_model(
    source: str,
    out: str | Path,
    *,
    quantize: str = "none",
    weights: str = "final",
    force: bool = False,
) -> dict[str, Any]:
    """Write ``source``'s policy to ``out`` (quantized per ``quantize``); returns the manifest."""
    from agentrl.eval.weights import load_start_weights, weights_source
    from agentrl.policy.roles import refuse_role_adapter_run

    if quantize not in QUANTIZE_CHOICES:
        raise ValueError(f"quantize must be one of {QUANTIZE_CHOICES}, got {quantize!r}")
    model_path, template = weights_source(source, weights)  # checks weights
    out = Path(out)
    _check_out(out, force)
    refuse_role_adapter_run(source, "an export")
    if saved_quantization(model_path):
        raise ValueError(f"{source!r} is already a quantized export; export from the run")
    q_config = quantization_config(quantize) if quantize != "none" else None  # fails early
    model, tok = load_policy(model_path, dtype="float32", device="cpu", chat_template=template)
    if weights == "start":
        load_start_weights(model, Path(source), "cpu")
    if out.exists() and force:
        shutil.rmtree(out)
    if q_config is None:
        save_policy(model, tok, out)
    else:
        _save_quantized(model, tok, out, q_config)
    run_config = Path(source) / "config.yaml"
    if run_config.is_file():
        shutil.copyfile(run_config, out / "config.yaml")
    manifest = {
        "source": source,
        "weights": weights,
        "quantize": quantize,
        "bytes": directory_bytes(out),
        "source_bytes": _source_bytes(model_path),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _source_bytes(model_path: str) -> int | None:
    from agentrl.policy.loading import resolve_model_dir

    path = Path(resolve_model_dir(model_path))
    return directory_bytes(path) if path.is_dir() else None


def _save_quantized(model: Any, tok: Any, out: Path, q_config: Any) -> None:
    """Quantize while loading from a full-precision copy (how transformers quantizes), then
    save the quantized model and the tokenizer."""
    from transformers import AutoModelForCausalLM

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".export-") as tmp:
        save_policy(model, tok, tmp)
        quantized = AutoModelForCausalLM.from_pretrained(
            tmp, dtype=torch.float32, quantization_config=q_config, device_map="cpu"
        )
        quantized.save_pretrained(out)
    tok.save_pretrained(out)
