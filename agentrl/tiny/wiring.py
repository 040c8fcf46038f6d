"""Hand-wired copy heads for the tiny model's initial weights.

A small transformer copies from its context with an *induction circuit*: a head in one layer
that attends to the previous position (so every position also carries "which token came
before me"), and a head in the next layer that attends to the position whose previous token
equals the current token, and copies the token found there. Trained from random weights, the
tiny model did not form this circuit within any build budget we tried on 2 CPU cores (a
repeated random span still cost 5.4 nats after 1,200 steps), so it could not copy a city into a
tool call or a temperature into an answer. ``wire_copy_heads`` writes the circuit into the
freshly initialised weights instead; pretraining then only has to learn when to use it.

Layout of the residual stream (hidden size ``H``): token identity in dims ``[0, TOKEN_DIMS)``
(embeddings start at zero elsewhere), previous-token information in
``[TOKEN_DIMS, TOKEN_DIMS + head_dim)``. Head 0 of layer 0 is the previous-token head: its
queries and keys are constants (biases only), so after RoPE their score depends only on the
distance and peaks at distance 1. Head 0 of layer 1 is the induction head: it matches the
current token against the previous-token block on the slowly rotating RoPE pairs (so the match
holds over long distances) and writes the matched token's identity back. All other residual
branches start at zero (zero-init of output projections), so the stream starts clean.
"""

from __future__ import annotations

import math
from typing import Any

import torch

#: Residual dims holding token identity; the previous-token block follows them.
TOKEN_DIMS = 128
#: RoPE pairs (fastest first) that carry the previous-token head's position pattern.
FAST_PAIRS = 8
#: A RoPE pair counts as slow when it turns less than this many radians over ``SPAN`` tokens.
SLOW_TURN, SPAN = 0.5, 1024
#: Scales: previous-token score (``a * b``), previous-token write, match, copy write.
SCALES = {"a": 11.0, "b": 11.0, "write": 0.02, "match": 3.0, "copy": 0.5}


def rope_angles(base: float, head_dim: int) -> torch.Tensor:
    """theta_i = base^(-2i/head_dim) for the head_dim/2 RoPE pairs (i, i + head_dim/2)."""
    half = head_dim // 2
    return base ** (-torch.arange(half, dtype=torch.float64) * 2 / head_dim)  # (half,)


def slow_pairs(theta: torch.Tensor) -> list[int]:
    """RoPE pairs that turn by less than ``SLOW_TURN`` radians over ``SPAN`` positions."""
    return [i for i in range(len(theta)) if float(theta[i]) * SPAN < SLOW_TURN]


@torch.no_grad()
def wire_copy_heads(model: Any, seed: int = 0) -> Any:
    """Write a previous-token head (layer 0) and an induction head (layer 1) into ``model``.

    ``model`` is a freshly initialised ``Qwen2ForCausalLM`` with at least 2 layers, q/k/v
    biases, ``hidden_size >= TOKEN_DIMS + head_dim`` and enough slow RoPE pairs (a large
    ``rope_theta``, e.g. 1e6). Returns the model, changed in place.
    """
    cfg = model.config
    hd = cfg.hidden_size // cfg.num_attention_heads
    half = hd // 2
    if cfg.hidden_size < TOKEN_DIMS + hd or cfg.num_hidden_layers < 2:
        raise ValueError(f"wire_copy_heads needs hidden_size >= {TOKEN_DIMS + hd} and 2+ layers")
    rope = getattr(cfg, "rope_parameters", None) or {}
    theta = rope_angles(float(rope.get("rope_theta", getattr(cfg, "rope_theta", 1e4))), hd)
    slow = slow_pairs(theta)
    if len(slow) < 4:
        raise ValueError(f"only {len(slow)} slow RoPE pairs: raise rope_theta (e.g. 1e6)")
    gen = torch.Generator().manual_seed(seed)
    proj = torch.randn(hd, TOKEN_DIMS, generator=gen) / math.sqrt(TOKEN_DIMS)  # (hd, TOKEN_DIMS)
    s = SCALES
    model.model.embed_tokens.weight[:, TOKEN_DIMS:] = 0.0

    # Layer 0, head 0: constant q and k; RoPE makes q_m . k_n = a*b*sum_i cos((m-n-1) theta_i).
    prev = model.model.layers[0].self_attn
    q_bias, k_bias = torch.zeros(hd), torch.zeros(hd)
    for i in range(FAST_PAIRS):
        q_bias[i], q_bias[i + half] = s["a"] * math.cos(theta[i]), -s["a"] * math.sin(theta[i])
        k_bias[i] = s["b"]
    prev.q_proj.weight[:hd] = 0.0
    prev.k_proj.weight[:hd] = 0.0
    prev.q_proj.bias[:hd], prev.k_proj.bias[:hd] = q_bias, k_bias
    prev.v_proj.weight[:hd] = 0.0
    prev.v_proj.weight[:hd, :TOKEN_DIMS] = proj  # value = projection of the token
    prev.v_proj.bias[:hd] = 0.0
    prev.o_proj.weight[:, :hd] = 0.0
    prev.o_proj.weight[TOKEN_DIMS : TOKEN_DIMS + hd, :hd] = s["write"] * torch.eye(hd)

    # Layer 1, head 0: query = projection of the current token, key = previous-token block,
    # both on the slow pairs only; value = projection of the token there, written back.
    ind = model.model.layers[1].self_attn
    dims = slow + [i + half for i in slow]
    for lin in (ind.q_proj, ind.k_proj):
        lin.weight[:hd] = 0.0
        lin.bias[:hd] = 0.0
    for j in dims:
        ind.q_proj.weight[j, :TOKEN_DIMS] = s["match"] * proj[j]
        ind.k_proj.weight[j, TOKEN_DIMS + j] = s["match"]
    ind.v_proj.weight[:hd] = 0.0
    ind.v_proj.weight[:hd, :TOKEN_DIMS] = proj
    ind.v_proj.bias[:hd] = 0.0
    ind.o_proj.weight[:, :hd] = 0.0
    ind.o_proj.weight[:TOKEN_DIMS, :hd] = s["copy"] * proj.T

    # Lookup heads (head 1 of layer 1, head 0 of layer 2): the same copying value/output as
    # the induction head, but queries and keys left random, so training only has to learn
    # *where* to look (e.g. "the city in the request" from a tool call's argument slot).
    lookups = [(1, 1), (2, 0)] if cfg.num_hidden_layers > 2 else [(1, 1)]
    for li, h in lookups:
        att = model.model.layers[li].self_attn
        rows = slice(h * hd, (h + 1) * hd)
        att.v_proj.weight[rows] = 0.0
        att.v_proj.weight[rows, :TOKEN_DIMS] = proj
        att.v_proj.bias[rows] = 0.0

    # Every other residual branch starts at zero; training grows them.
    for li, layer in enumerate(model.model.layers):
        o = layer.self_attn.o_proj.weight
        wired = {0} if li == 0 else {h for l2, h in [(1, 0), *lookups] if l2 == li}
        for h in range(cfg.num_attention_heads):
            cols = slice(h * hd, (h + 1) * hd)
            if h not in wired:
                o[:, cols] = 0.0
            elif (li, h) in lookups:
                o[:, cols] = 0.0
                o[:TOKEN_DIMS, cols] = s["copy"] * proj.T
        layer.mlp.down_proj.weight.zero_()
    return model
