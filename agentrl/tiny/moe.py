"""A tiny Mixture-of-Experts model, upcycled from the tiny dense one: ``build_tiny_moe()``.

Sparse upcycling (Komatsuzaki et al., 2022; Qwen1.5-MoE was made this way): the pretrained
tiny ``Qwen2ForCausalLM`` (``agentrl.tiny.builder``) becomes a ``Qwen2MoeForCausalLM`` whose
every layer routes each token to ``top_k`` of ``num_experts`` experts, each expert a copy of
the dense MLP. Attention, norms, embeddings and tokenizer (with its tool chat template) are
the dense model's; the router starts random; Qwen2-MoE's always-on shared expert starts with
a zero output projection and a zero gate. With the top-k weights renormalized
(``norm_topk_prob``) the upcycled model computes exactly the dense model's logits, so it calls
tools from the first step. A short continued pretraining on the tiny model's tool-use corpus
then lets the experts drift apart and the router learn (no load-balancing term: whatever
balance it ends with is the starting point RL's ``algo.moe_aux_coef`` works from).

``TINY_MOE_ID`` (``"agentrl/tiny-moe"``) names the default build wherever a model id is
accepted; any built directory loads by its path (``model.name=<dir>``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from transformers import (
    PreTrainedTokenizerFast,
    Qwen2ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
)

from agentrl.chat.render import encode_conversation
from agentrl.tiny.builder import TINY_VERSION, build_tiny_model, induction_rows
from agentrl.tiny.corpus import make_corpus
from agentrl.tiny.lock import build_once, cache_root

TINY_MOE_ID = "agentrl/tiny-moe"
#: Experts, experts per token, the shared expert's width, continued-pretraining steps.
MOE_DEFAULTS: dict[str, Any] = {
    "num_experts": 4,
    "top_k": 2,
    "shared_size": 64,
    "steps": 12,
    "batch_size": 8,
    "lr": 5e-4,
}
#: Dense config fields the MoE config keeps as they are.
_KEPT = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads", "max_position_embeddings", "rope_parameters", "rms_norm_eps",
         "hidden_act", "tie_word_embeddings", "eos_token_id", "pad_token_id", "bos_token_id",
         "initializer_range")  # fmt: skip


def default_tiny_moe_dir(num_experts: int = 4, top_k: int = 2) -> Path:
    """``$AGENTRL_CACHE/<TINY_VERSION>-moe-e<experts>k<top_k>``."""
    return cache_root() / f"{TINY_VERSION}-moe-e{num_experts}k{top_k}"


def moe_config(dense_config: Any, num_experts: int, top_k: int, shared_size: int) -> Qwen2MoeConfig:
    """The ``Qwen2MoeConfig`` of the upcycled ``dense_config``: every layer sparse, experts as
    wide as the dense MLP, top-k weights renormalized (the upcycled model equals the dense)."""
    if num_experts < 2 or not 1 <= top_k <= num_experts:
        raise ValueError(
            f"num_experts must be >= 2 and top_k in [1, num_experts], got {num_experts}, {top_k}"
        )
    kept = {k: getattr(dense_config, k) for k in _KEPT if hasattr(dense_config, k)}
    return Qwen2MoeConfig(
        **kept,
        num_experts=num_experts,
        num_experts_per_tok=top_k,
        moe_intermediate_size=dense_config.intermediate_size,
        intermediate_size=dense_config.intermediate_size,
        shared_expert_intermediate_size=shared_size,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        qkv_bias=True,
        use_sliding_window=False,
        output_router_logits=False,  # agentrl's RL loss computes its own masked term
        dtype="float32",
    )


def upcycle(
    dense: Qwen2ForCausalLM, num_experts: int = 4, top_k: int = 2, shared_size: int = 64,
    seed: int = 0,
) -> Qwen2MoeForCausalLM:  # fmt: skip
    """A ``Qwen2MoeForCausalLM`` with ``dense``'s weights, each expert a copy of its MLP.

    The router is drawn from ``seed``; the shared expert contributes 0 at first (zero down
    projection and gate). Same logits as ``dense`` (up to float rounding)."""
    torch.manual_seed(seed)
    config = moe_config(dense.config, num_experts, top_k, shared_size)
    moe = Qwen2MoeForCausalLM(config).float()
    state = moe.state_dict()
    src = dense.state_dict()
    new: dict[str, torch.Tensor] = {}
    for key, value in src.items():
        if ".mlp." not in key:
            new[key] = value
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}.mlp."
        gate, up = src[p + "gate_proj.weight"], src[p + "up_proj.weight"]  # (I, H) each
        down = src[p + "down_proj.weight"]  # (H, I)
        gate_up = torch.cat([gate, up], dim=0)  # (2I, H): Qwen2MoeExperts chunks gate, up
        new[p + "experts.gate_up_proj"] = gate_up.unsqueeze(0).repeat(num_experts, 1, 1)
        new[p + "experts.down_proj"] = down.unsqueeze(0).repeat(num_experts, 1, 1)  # (E, H, I)
        new[p + "gate.weight"] = state[p + "gate.weight"]  # (E, H) random router
        for part in ("gate_proj", "up_proj"):
            new[p + f"shared_expert.{part}.weight"] = state[p + f"shared_expert.{part}.weight"]
        new[p + "shared_expert.down_proj.weight"] = torch.zeros_like(
            state[p + "shared_expert.down_proj.weight"]
        )
        new[p + "shared_expert_gate.weight"] = torch.zeros_like(
            state[p + "shared_expert_gate.weight"]
        )
    missing = sorted(set(state) - set(new) - {"lm_head.weight"})
    if missing:
        raise RuntimeError(f"upcycle: no source for MoE weights {missing}")
    moe.load_state_dict({k: v for k, v in new.items() if k in state}, strict=False)
    moe.generation_config = dense.generation_config
    return moe


def continued_pretraining(
    model: Qwen2MoeForCausalLM, tokenizer: Any, steps: int, seed: int, progress: bool,
    batch_size: int, lr: float,
) -> dict[str, Any]:  # fmt: skip
    """``steps`` batches of the tiny model's tool-use corpus (plus induction rows that keep
    its copy heads); the LM loss only. Returns ``train_rows``' statistics."""
    from agentrl.sft import train_rows  # sft imports chat only; kept local as in the builder

    corpus = make_corpus(max(steps, 1) * batch_size, seed=seed + 11)
    rows = [encode_conversation(tokenizer, m, t) for m, t in corpus]
    rows += induction_rows(tokenizer, len(rows) // 4, seed=seed + 12)
    return train_rows(
        model, tokenizer, [(i[:768], k[:768]) for i, k in rows], lr=lr, batch_size=batch_size,
        seed=seed, progress=progress, desc="tiny MoE: continued pretraining",
        warmup_steps=min(10, steps // 5),
    )  # fmt: skip


def build_tiny_moe(
    out_dir: str | Path | None = None,
    *,
    dense: str | Path | None = None,
    num_experts: int = MOE_DEFAULTS["num_experts"],
    top_k: int = MOE_DEFAULTS["top_k"],
    shared_size: int = MOE_DEFAULTS["shared_size"],
    steps: int = MOE_DEFAULTS["steps"],
    batch_size: int = MOE_DEFAULTS["batch_size"],
    seed: int = 0,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Build (or reuse) the upcycled tiny MoE in ``out_dir`` and return the path.

    ``dense``: the tiny dense build to upcycle (default: ``build_tiny_model()``'s, built first
    when missing); ``steps``: continued-pretraining batches of ``batch_size`` conversations
    (0: the exact upcycled copy).
    Written like the dense build: temp directory, rename, ``BUILD_COMPLETE`` marker last.
    """
    out = Path(out_dir) if out_dir is not None else default_tiny_moe_dir(num_experts, top_k)
    dense_dir = Path(dense) if dense is not None else build_tiny_model(progress=progress)

    def write(tmp: Path) -> str:
        t0 = time.perf_counter()
        # as saved: the tiny tokenizer's own split (agentrl.policy.loading.load_tokenizer)
        tokenizer = PreTrainedTokenizerFast.from_pretrained(dense_dir)
        base = Qwen2ForCausalLM.from_pretrained(dense_dir, dtype=torch.float32)
        model = upcycle(base, num_experts, top_k, shared_size, seed=seed)
        loss = float("nan")
        if steps > 0:
            stats = continued_pretraining(
                model, tokenizer, steps, seed, progress, batch_size, MOE_DEFAULTS["lr"]
            )  # fmt: skip
            loss = stats["final_loss"]
        model.eval()
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        return (f"upcycled_from={dense_dir} experts={num_experts} top_k={top_k} steps={steps} "
                f"final_loss={loss:.4f} seconds={time.perf_counter() - t0:.1f}\n")  # fmt: skip

    return build_once(out, write, force)
