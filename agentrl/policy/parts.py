"""A causal LM as its trunk and its LM head: the trainer's chunked log-probs and the engine's
decode loop both run the trunk to hidden states and apply the head only where they need it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl.policy.lora import AdapterDisabled
from agentrl.policy.prefix import hf_model

#: Config fields of models whose logits are more than ``lm_head(hidden)`` (soft-capping,
#: scaling): such models keep the full-logits path.
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


@dataclass(frozen=True)
class LMParts:
    """A causal LM split into its trunk and its LM head."""

    decoder: Any  # HF base model: (B, T) ids -> last_hidden_state (B, T, H), post final norm
    head: Any  # (n, H) -> (n, V)
    vocab: int
    context: Callable[[], Any]  # entered around every call (adapters off for a LoRA reference)


def lm_parts(model: Any) -> LMParts | str:
    """The trunk and LM head of an HF causal LM (plain, peft-wrapped, or a LoRA model seen
    with its adapters off), or the reason it has none, as a sentence."""
    from transformers import PreTrainedModel

    context: Callable[[], Any] = contextlib.nullcontext
    inner = model
    if isinstance(model, AdapterDisabled):
        inner, context = model.model, model.off
    peft_config = getattr(inner, "active_peft_config", None)
    if peft_config is not None and getattr(peft_config, "is_prompt_learning", False):
        return "a peft prompt-learning model adds virtual tokens in its own forward"
    hf = hf_model(inner)
    if not isinstance(hf, PreTrainedModel):
        return f"{type(model).__name__} is not a transformers PreTrainedModel"
    head = hf.get_output_embeddings()
    decoder = hf.get_decoder() if head is not None else None
    if head is None or decoder is None or decoder is hf:
        return f"{type(hf).__name__} has no separate trunk and LM head"
    config = hf.config.get_text_config()
    for field in LOGIT_TRANSFORMS:
        if getattr(config, field, None) not in (None, 1, 1.0):
            return f"{type(hf).__name__} transforms its logits ({field})"
    vocab = getattr(head, "out_features", None) or config.vocab_size
    return LMParts(decoder, head, int(vocab), context)
