"""LoRA adapters through peft: wrap a policy, use its frozen base as the reference, merge.

With LoRA only the adapter matrices train; the base weights stay as they were when RL
began, so the reference policy is the same model with its adapters switched off
(``AdapterDisabled``) and no second copy is held in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch


def apply_lora(
    model: Any,
    *,
    rank: int,
    alpha: float,
    dropout: float,
    target_modules: list[str],
    adapter_names: tuple[str, ...] = ("default",),
) -> Any:
    """Wrap ``model`` in a peft ``PeftModel`` with LoRA adapters; only adapters train.

    ``adapter_names``: one adapter per name, all of the same shape and all trainable (the
    first active); several are role adapters (``agentrl.policy.roles``)."""
    from peft import LoraConfig, get_peft_model

    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    missing = [t for t in target_modules if t not in names]
    if missing:
        raise ValueError(
            f"config field 'lora.target_modules': {missing} not found in the model "
            f"(linear layers it has include {sorted(_linear_names(model))[:12]})"
        )
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=list(target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, config, adapter_name=adapter_names[0])
    for name in adapter_names[1:]:
        peft_model.add_adapter(name, config)
    if len(adapter_names) > 1:
        from agentrl.policy.roles import keep_adapters_trainable

        keep_adapters_trainable(peft_model)
    return peft_model


def _linear_names(model: Any) -> set[str]:
    return {
        n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
    }


class AdapterDisabled:
    """A peft model seen with its adapters off: the frozen base, used as the reference policy."""

    def __init__(self, peft_model: Any) -> None:
        self.model = peft_model

    def __call__(self, **kwargs: Any) -> Any:
        with self.off():
            return self.model(**kwargs)

    @contextmanager
    def off(self) -> Iterator[None]:
        """The adapters off inside the block. peft's ``disable_adapter`` freezes every adapter
        but the active one when it ends; role adapters are made trainable again."""
        try:
            with self.model.disable_adapter():
                yield
        finally:
            if len(getattr(self.model, "peft_config", {})) > 1:
                from agentrl.policy.roles import keep_adapters_trainable

                keep_adapters_trainable(self.model)

    def parameters(self):
        return self.model.parameters()


def merge_and_save(peft_model: Any, tokenizer: Any, path: str | Path, adapter_path: str | Path):
    """Save the adapter to ``adapter_path``, then merge it into the base and save the result.

    Returns the merged plain model (``peft_model`` must not be used afterwards: peft merges
    in place).
    """
    from agentrl.policy.loading import save_policy

    peft_model.save_pretrained(str(adapter_path))
    merged = peft_model.merge_and_unload()
    save_policy(merged, tokenizer, path)
    return merged
