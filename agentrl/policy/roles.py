"""Role adapters: a manager and a worker LoRA adapter on one frozen base
(``rollout.hierarchy.adapters: per_role``).

peft holds both adapters in one model and applies the active one. ``role_adapter`` switches
it for a block of code (decoding a role's contexts, computing a role's log-probs, updating a
role's rows). peft's ``set_adapter`` also freezes every adapter but the active one; this module
keeps both trainable, so the optimizer and checkpoints always see the same parameters (an
adapter that is not active gets no gradient, and AdamW skips a parameter without one).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROLES = ("manager", "worker")


def per_role(cfg: Any) -> bool:
    """Whether a run's ``Config`` gives manager and worker a LoRA adapter each."""
    return cfg.rollout.mode == "hierarchical" and cfg.rollout.hierarchy.adapters == "per_role"


def uses_role_adapters(model: Any) -> bool:
    """Whether ``model`` is a peft model holding the manager and worker adapters."""
    return set(ROLES) <= set(getattr(model, "peft_config", {}) or {})


def keep_adapters_trainable(model: Any) -> None:
    """Every LoRA parameter trains, whichever adapter is active."""
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.requires_grad_(True)


@contextmanager
def role_adapter(model: Any, role: str) -> Iterator[None]:
    """Inside the block ``model`` applies ``role``'s adapter; the previous one after it."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    if not uses_role_adapters(model):
        raise ValueError(f"the policy has no {role!r} adapter (rollout.hierarchy.adapters)")
    previous = model.active_adapter
    model.set_adapter(role)
    keep_adapters_trainable(model)
    try:
        yield
    finally:
        model.set_adapter(previous)
        keep_adapters_trainable(model)


def role_adapter_dirs(run_dir: str | Path) -> dict[str, Path] | None:
    """A run's saved role adapters (``adapter/manager``, ``adapter/worker``), or None."""
    dirs = {r: Path(run_dir) / "adapter" / r for r in ROLES}
    return dirs if all((d / "adapter_config.json").is_file() for d in dirs.values()) else None


def refuse_role_adapter_run(source: str | Path, needs: str) -> None:
    """A ValueError when ``source`` is a run saved with role adapters: two policies, where
    ``needs`` (a server, an export) takes one."""
    if role_adapter_dirs(source) is not None:
        raise ValueError(f"{str(source)!r} was trained with a LoRA adapter per role "
                         "(rollout.hierarchy.adapters=per_role): it is two policies, and "
                         f"{needs} takes one; its adapters are in adapter/manager and "
                         "adapter/worker, its base in model/ (evaluate it with agentrl "
                         "eval)")  # fmt: skip


def with_role_adapters(model: Any, source: str | Path) -> Any:
    """``model`` loaded from ``source``; where that is a run saved with role adapters, the
    model (its base) wrapped with both (``load_role_adapters``)."""
    dirs = role_adapter_dirs(source)
    return model if dirs is None else load_role_adapters(model, dirs)


def load_role_adapters(base: Any, dirs: dict[str, Path]) -> Any:
    """``base`` (a run's ``model/``) wrapped in peft with both saved role adapters."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(base, str(dirs["manager"]), adapter_name="manager")
    model.load_adapter(str(dirs["worker"]), adapter_name="worker")
    model.set_adapter("manager")
    return model.eval()


def save_role_adapters(model: Any, tokenizer: Any, model_dir: Path, adapter_dir: Path) -> None:
    """Both adapters under ``adapter_dir`` (one folder per role) and the frozen base in
    ``model_dir``: two adapters cannot be merged into one set of weights. ``model`` must not be
    used afterwards (its LoRA layers are removed)."""
    from agentrl.policy.loading import save_policy

    model.save_pretrained(str(adapter_dir))
    save_policy(model.unload(), tokenizer, model_dir)
