"""LoRA adapters through peft: wrap a policy, use its frozen base as the reference, merge.

With LoRA only the adapter matrices train; the base weights stay as they were when RL
began, so the reference policy is the same model with its adapters switched off
(``AdapterDisabled``) and no second copy is held in memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def apply_lora(
    model: Any, *, rank: int, alpha: float, dropout: float, target_modules: list[str]
) -> Any:
    """Wrap ``model`` in a peft ``PeftModel`` with LoRA adapters; only adapters train."""
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
    return get_peft_model(model, config)


def _linear_names(model: Any) -> set[str]:
    return {
        n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
    }


class AdapterDisabled:
    """A peft model seen with its adapters off: the frozen base, used as the reference policy."""

    def __init__(self, peft_model: Any) -> None:
        self.model = peft_model

    def __call__(self, **kwargs: Any) -> Any:
        with self.model.disable_adapter():
            return self.model(**kwargs)

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
