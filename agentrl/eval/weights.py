"""The weights an evaluation loads: a model path or hub id, a run directory's final model
(with its role adapters) or its weights when RL began (``--weights start``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.chat.render import stop_token_ids
from agentrl.engine.decoder import Engine
from agentrl.engine.shadow import decode_dtype
from agentrl.policy.loading import load_policy
from agentrl.policy.roles import with_role_adapters


def resolve_model_path(model_or_run_dir: str) -> str:
    """A run directory means its ``model/`` folder; anything else is a path or hub id.
    agentrl's own ids (``agentrl/tiny``, packaged models) are ids even where a folder of
    that name exists (the package's own ``agentrl/tiny`` in a checkout)."""
    from agentrl.policy.packaged import is_packaged
    from agentrl.tiny.builder import TINY_MODEL_ID

    if model_or_run_dir == TINY_MODEL_ID or is_packaged(model_or_run_dir):
        return model_or_run_dir
    p = Path(model_or_run_dir)
    looks_like_path = (
        model_or_run_dir.startswith(("/", ".", "~")) or model_or_run_dir.count("/") > 1
    )
    if looks_like_path and not p.exists():
        raise FileNotFoundError(
            f"{model_or_run_dir!r} does not exist (expected a run directory, "
            "a saved model, a hub id like 'org/name', or 'agentrl/tiny')"
        )
    if (p / "model" / "config.json").is_file():
        return str(p / "model")
    if p.is_file() and p.suffix.lower() == ".gguf":
        return model_or_run_dir
    if p.exists() and not (p / "config.json").is_file():
        from agentrl.checkpoint import START_FILE

        hint = ""
        if (p / "checkpoints" / START_FILE).is_file():  # a run stopped before it finished
            hint = "; its warm start is saved: evaluate it with --weights start"
        raise FileNotFoundError(
            f"{model_or_run_dir!r} is neither a run directory (with model/) nor a saved model "
            f"(with config.json){hint}"
        )
    return model_or_run_dir


def load_start_weights(model: Any, run_dir: Path, device: str,
                       asked_by: str = "--weights start") -> None:  # fmt: skip
    """Load a run's weights at RL start (``checkpoints/rl_start.pt``) into ``model``;
    ``asked_by`` (the option or key that named ``run_dir``) heads the errors."""
    import torch

    from agentrl.checkpoint import START_FILE

    path = run_dir / "checkpoints" / START_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{asked_by} needs a run directory with {path}; not found")
    state = torch.load(path, map_location=device)  # written by this project's trainer
    try:
        model.load_state_dict(state)
    except RuntimeError as err:  # a LoRA run's start weights are the adapter-wrapped model's
        raise ValueError(f"{asked_by}: {path} does not fit the model it is loaded into: "
                         f"{str(err)[:200]}") from err  # fmt: skip


def weights_source(model_or_run_dir: str, weights: str) -> tuple[str, str]:
    """(model path or id, chat template) to load before ``weights`` apply: a run's ``model/``
    (or the path itself); for ``start`` weights of a run stopped before it saved ``model/``
    (an evaluation before RL cut short), the base model its ``config.yaml`` names."""
    if weights not in ("final", "start"):
        raise ValueError(f"weights must be 'final' or 'start', got {weights!r}")
    run = Path(model_or_run_dir)
    stopped = (run / "config.yaml").is_file() and not (run / "model" / "config.json").is_file()
    if weights == "start" and stopped:
        from agentrl.config import load_config

        cfg = load_config(run / "config.yaml")
        return cfg.model.name, cfg.model.chat_template
    return resolve_model_path(model_or_run_dir), "auto"


def load_eval_engine(model_or_run_dir: str, device: str, weights: str = "final",
                     exact: bool = True) -> Engine:  # fmt: skip
    """A greedy-capable decode engine on a model, hub id or run directory (``weights``: the
    run's ``final`` model, with its role adapters if it has them, or its ``start``).
    ``exact``: decode in the model's own dtype, so the same weights score the same whatever
    shares a batch (``Engine.in_own_dtype``); False: a bf16 copy where bf16 is native (the
    server's choice: faster, and no figure rests on it)."""
    model_path, template = weights_source(model_or_run_dir, weights)
    model, tok = load_policy(model_path, device=device, chat_template=template)
    if weights == "start":
        load_start_weights(model, Path(model_or_run_dir), device)
    model = with_role_adapters(model, model_or_run_dir) if weights == "final" else model
    dtype = None if exact else decode_dtype("auto", model, device)
    return Engine(model, tok, stop_token_ids(tok), tok.pad_token_id, dtype=dtype)
