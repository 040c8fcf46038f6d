"""The hand-wired copy heads: a previous-token head in layer 0, an induction head in layer 1."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from agentrl.tiny.builder import MODEL_CONFIG
from agentrl.tiny.wiring import rope_angles, slow_pairs, wire_copy_heads


def _model(rope_theta: float = 1e6) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    shape = {**MODEL_CONFIG, "rope_theta": rope_theta}  # the tiny model's own shape
    cfg = Qwen2Config(vocab_size=2048, attn_implementation="eager", **shape)
    return Qwen2ForCausalLM(cfg).float().eval()


def _repeat_batch(prefix: int, span: int = 16) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(10, 2000, (4, span), generator=g)
    return torch.cat([torch.randint(10, 2000, (4, prefix), generator=g), x, x], 1)  # (4, T)


def _repeat_loss(model, ids: torch.Tensor, start: int) -> float:
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[:, :-1], -1)
    return float(-logp.gather(-1, ids[:, 1:, None]).squeeze(-1)[:, start:].mean())


def test_slow_pairs_need_a_large_rope_base():
    assert len(slow_pairs(rope_angles(1e4, 64))) == 5
    assert len(slow_pairs(rope_angles(1e6, 64))) == 14
    with pytest.raises(ValueError, match="raise rope_theta"):
        wire_copy_heads(_model(rope_theta=1e3))


def test_wired_heads_attend_to_the_previous_token_and_the_induction_target():
    model = wire_copy_heads(_model())
    prefix, span = 300, 16
    ids = _repeat_batch(prefix, span)  # random prefix, then a span, then the span again
    with torch.no_grad():
        att = model(input_ids=ids, output_attentions=True).attentions
    prev = att[0][:, 0]  # (B, T, T): layer 0, head 0
    t = torch.arange(1, ids.shape[1])
    assert prev[:, t, t - 1].min() > 0.99  # every position looks at the one before it
    ind = att[1][:, 0]  # layer 1, head 0
    second = torch.arange(prefix + span, ids.shape[1] - 1)  # positions in the repeat
    # the target is the first copy's next token: span - 1 positions back. The match is
    # approximate (a random projection), so a rare prefix token can win: 58 of 60 measured.
    hits = (ind[:, second].argmax(-1) == second - span + 1).float().mean()
    assert hits > 0.9


def test_wiring_makes_a_repeat_cheaper_before_any_training():
    ids = _repeat_batch(100)
    plain = _repeat_loss(_model(), ids, 116)
    wired = _repeat_loss(wire_copy_heads(_model()), ids, 116)
    assert plain > 7.0 and wired < plain - 1.0
