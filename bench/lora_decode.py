"""Decoding a LoRA policy: through peft's adapter layers (the old path) vs from a plain copy
with the adapters merged (``agentrl.engine.shadow``, today's path), in one run.

    python bench/lora_decode.py --model agentrl/smollm2-135m --rows 32 --new 64 --json lora.json

The policy is the model wrapped in rank-16 adapters on every attention and MLP projection
(configs/smollm2_weather_lora.yaml's), with non-zero adapter weights. Each side decodes the
same weather prompts (one per row, ~300 tokens, levels 1-3) for exactly ``--new`` tokens
greedily (no stop token) in the run's decode dtype (``rollout.dtype: auto``), after a warm-up;
the figure is policy tokens per second over prefill and decode, the best of ``--repeats``.
The merged side also pays its refresh (the merge after an update) inside the timing, as a
training step does. The two sides' greedy tokens are compared (they may part where two
logits tie within rounding). Prints a table and the JSON report as the last line. Not a test.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from turn_cost import prompts

import agentrl.engine.shadow as shadow_module
from agentrl.engine.decoder import Engine
from agentrl.engine.shadow import decode_dtype
from agentrl.policy.loading import load_policy
from agentrl.policy.lora import apply_lora

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="agentrl/smollm2-135m")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--new", type=int, default=64, help="tokens decoded per row")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def lora_policy(model, rank: int):
    policy = apply_lora(model, rank=rank, alpha=2.0 * rank, dropout=0.0, target_modules=TARGETS)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a trained adapter, not the zero-initialised one
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 1e-3)
    return policy


def decode(policy, tok, starts, new: int, dtype, merged: bool, repeats: int):
    """(best tokens/s, the greedy ids) for one side; ``merged=False`` is the old path: the
    peft model itself (or its plain dtype copy, adapters still separate layers)."""
    real = shadow_module.is_lora
    if not merged:
        shadow_module.is_lora = lambda model: False
    try:
        engine = Engine(policy, tok, [-1], tok.pad_token_id, dtype=dtype)
        engine.generate(starts[:2], max_new_tokens=4, greedy=True)  # warm-up: builds the copy
        best, out = 0.0, None
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = engine.generate(starts, max_new_tokens=new, greedy=True)  # refresh included
            best = max(best, len(starts) * new / (time.perf_counter() - t0))
    finally:
        shadow_module.is_lora = real
    return best, [s.ids for s in out]


def main(argv=None) -> None:
    args = parse_args(argv)
    model, tok = load_policy(args.model)
    dtype = decode_dtype("auto", model, "cpu")
    policy = lora_policy(model, args.rank)
    starts = prompts(tok, args.rows)
    old, old_ids = decode(policy, tok, starts, args.new, dtype, False, args.repeats)
    new, new_ids = decode(policy, tok, starts, args.new, dtype, True, args.repeats)
    same = sum(a == b for a, b in zip(old_ids, new_ids, strict=True))
    report = {"model": args.model, "rows": args.rows, "new": args.new, "rank": args.rank,
              "decode_dtype": str(dtype or next(model.parameters()).dtype),
              "adapter_layers_tokens_per_s": round(old, 1),
              "merged_copy_tokens_per_s": round(new, 1), "speedup": round(new / old, 2),
              "rows_with_identical_greedy_tokens": same}  # fmt: skip
    print(f"{'path':<28}{'tokens/s':>10}")
    print(f"{'peft adapter layers':<28}{old:>10.1f}")
    print(f"{'merged copy (refreshed)':<28}{new:>10.1f}   {new / old:.2f}x")
    print(f"identical greedy rows: {same} of {args.rows}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
