"""The decoding copy's pre-packed linear layers: same products as ``F.linear``, laid out again
when the copy is refreshed, and left alone where packing does not apply."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from agentrl.engine.packed import PackedLinear, pack_linears, packing_works
from agentrl.engine.shadow import make_shadow, refresh_shadow

needs_packing = pytest.mark.skipif(not packing_works(torch.bfloat16),
                                   reason="oneDNN bf16 packed linear not available")  # fmt: skip


def _plain_bf16(model):
    plain = copy.deepcopy(model).to(torch.bfloat16)
    return plain.eval()


def test_fp32_models_are_not_packed(tiny_policy):
    model, _ = tiny_policy
    copy_ = copy.deepcopy(model)
    assert pack_linears(copy_) == 0
    assert not any(isinstance(m, PackedLinear) for m in copy_.modules())


@needs_packing
def test_packed_linear_matches_f_linear_with_bias():
    layer = torch.nn.Linear(48, 80, dtype=torch.bfloat16)
    x = torch.randn(2, 7, 48).to(torch.bfloat16)
    packed = PackedLinear(layer)
    assert torch.allclose(packed(x).float(), F.linear(x, layer.weight, layer.bias).float(),
                          rtol=0.02, atol=0.02)  # fmt: skip
    assert packed.weight is layer.weight


@needs_packing
def test_shadow_is_packed_and_follows_the_policy_after_refresh(tiny_policy):
    model, _ = tiny_policy
    model = copy.deepcopy(model)
    linears = sum(type(m) is torch.nn.Linear for m in model.modules())
    shadow = make_shadow(model, torch.bfloat16)
    assert sum(isinstance(m, PackedLinear) for m in shadow.modules()) == linears
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=gen)

    def close_to_plain():
        with torch.no_grad():
            got = shadow(input_ids=ids).logits.float()
            want = _plain_bf16(model)(input_ids=ids).logits.float()
        return float((got - want).abs().max())

    assert close_to_plain() < 0.05
    with torch.no_grad():  # an "update" that changes every output
        for p in model.parameters():
            p.mul_(1.5)
    refresh_shadow(shadow, model)
    assert close_to_plain() < 0.05  # the packed weights were laid out again
