"""A LoRA policy decodes from a plain copy with its adapters merged (``agentrl.engine.shadow``):
the same logits as the peft model, no adapter modules left, refreshed after every update, and
a trainer told to recompute the old log-probs with the policy."""

from __future__ import annotations

import copy

import torch

from agentrl.chat.render import stop_token_ids
from agentrl.engine.decoder import Engine
from agentrl.engine.shadow import is_lora, make_shadow, merged_parameters
from agentrl.policy.lora import apply_lora


def _lora(model):
    peft_model = apply_lora(copy.deepcopy(model), rank=4, alpha=8.0, dropout=0.0,
                            target_modules=["q_proj", "v_proj", "up_proj"])  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # lora_B starts at zero: give the adapters a real delta
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return peft_model


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_the_merged_copy_computes_what_the_adapters_do(tiny_policy):
    model, _ = tiny_policy
    policy = _lora(model)
    ids = torch.tensor([[1, 5, 9, 14, 3, 7, 2, 11]])
    assert is_lora(policy) and not is_lora(model)
    shadow = make_shadow(policy, torch.float32)
    assert not any("lora_" in n or "base_layer" in n for n, _ in shadow.named_parameters())
    assert (_logits(shadow, ids) - _logits(policy, ids)).abs().max() < 1e-4
    assert (_logits(model, ids) - _logits(policy, ids)).abs().max() > 1e-3  # the delta is real
    names = {n for n, _ in shadow.named_parameters()}
    assert set(merged_parameters(policy)) == names


def test_the_engine_refreshes_the_merged_copy_after_an_update(tiny_policy):
    model, tok = tiny_policy
    policy = _lora(model)
    engine = Engine(policy, tok, stop_token_ids(tok), tok.pad_token_id, dtype=None)
    assert not engine.decodes_own_weights  # the trainer recomputes old log-probs
    first = engine.decoding_model()
    assert first is not policy and not is_lora(first)
    with torch.no_grad():  # an "update" of the adapters only
        for name, p in policy.named_parameters():
            if "lora_A" in name:
                p.mul_(1.5)
    again = engine.decoding_model()
    ids = torch.tensor([[2, 4, 6, 8, 10, 12]])
    assert again is first  # one copy, refreshed in place
    assert (_logits(again, ids) - _logits(policy, ids)).abs().max() < 1e-4
