"""The engine's attention reads grouped K/V heads in place and agrees with transformers' SDPA
path (which copies them) under the engine's masks; it is switched on only inside its block."""

from __future__ import annotations

import types

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from agentrl.engine.attention import NAME, engine_attention, sdpa_gqa_attention


@pytest.mark.parametrize("q_len", [1, 7])
def test_gqa_attention_equals_transformers_sdpa(q_len):
    g = torch.Generator().manual_seed(0)
    b, hq, hkv, k_len, d = 4, 9, 3, 40, 16
    query = torch.randn(b, hq, q_len, d, generator=g)
    key = torch.randn(b, hkv, k_len, d, generator=g)
    value = torch.randn(b, hkv, k_len, d, generator=g)
    mask = torch.ones(b, 1, q_len, k_len, dtype=torch.bool)
    mask[1, :, :, 25:] = False  # a shorter row
    mask[2, :, :, :3] = False  # a row with a padded front
    module = types.SimpleNamespace(num_key_value_groups=hq // hkv, is_causal=True,
                                   training=False)  # fmt: skip
    ours, _ = sdpa_gqa_attention(module, query, key, value, mask, scaling=d**-0.5)
    theirs, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=d**-0.5)
    assert ours.shape == theirs.shape == (b, q_len, hq, d)
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_engine_attention_is_scoped_to_its_block(tiny_policy):
    model, _ = tiny_policy
    assert model.config._attn_implementation == "sdpa"
    with engine_attention(model):
        assert model.config._attn_implementation == NAME
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError), engine_attention(model):
        raise RuntimeError("a failing forward")
    assert model.config._attn_implementation == "sdpa"
    model.config._attn_implementation = "eager"  # other implementations are left alone
    try:
        with engine_attention(model):
            assert model.config._attn_implementation == "eager"
    finally:
        model.config._attn_implementation = "sdpa"
