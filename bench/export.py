"""Quantized exports vs full precision: size on disk, decode tokens/s and held-out success.

Exports ``policy`` (a run directory) as fp32, int8 and nf4 (``agentrl export``), then for each
measures the weight bytes, greedy decode tokens/s through the engine with 1 and 8 rows (64 new
tokens after a chat prompt; fp32 also through the engine's default bf16 copy where bf16 is
native), and the success of ``agentrl eval`` on the run's own task (held-out seeds, greedy).
Not a test: prints figures and writes them to ``--json``.

    python bench/export.py runs/ws_last3 --episodes 96 --json /tmp/export.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from agentrl.engine.decoder import Engine
from agentrl.eval.api import run_eval
from agentrl.export import export_model
from agentrl.policy.loading import load_policy

PROMPT = [{"role": "user", "content": "Tell me about the weather in Paris, Oslo and Lima."}]


def decode_rate(path: str, rows: int, dtype: torch.dtype | None, new_tokens: int = 64) -> float:
    """Greedy decode tokens/s of ``rows`` copies of one chat prompt (after a warm-up call)."""
    model, tok = load_policy(path)
    ids = tok(
        tok.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False),
        add_special_tokens=False,
    )["input_ids"]
    engine = Engine(model, tok, [], tok.pad_token_id or 0, dtype=dtype)
    engine.generate([ids] * rows, max_new_tokens=8, greedy=True)
    start = time.perf_counter()
    out = engine.generate([ids] * rows, max_new_tokens=new_tokens, greedy=True)
    return sum(len(s.ids) for s in out) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("policy", help="A run directory.")
    ap.add_argument("--episodes", type=int, default=96)
    ap.add_argument("--kinds", default="none,int8,nf4")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from agentrl.machine import native_bf16

    rows = []
    with tempfile.TemporaryDirectory(prefix="agentrl-export-bench-") as tmp:
        for kind in args.kinds.split(","):
            out = Path(tmp) / kind
            manifest = export_model(args.policy, out, quantize=kind)
            row = {"quantize": kind, "mib": manifest["bytes"] / 2**20}
            row["tok_s_1"] = decode_rate(str(out), 1, None)
            row["tok_s_8"] = decode_rate(str(out), 8, None)
            if kind == "none" and native_bf16("cpu"):
                row["bf16_copy_tok_s_1"] = decode_rate(str(out), 1, torch.bfloat16)
                row["bf16_copy_tok_s_8"] = decode_rate(str(out), 8, torch.bfloat16)
            report, _ = run_eval(str(out), episodes=args.episodes)
            row["success_rate"] = report["success_rate"]
            row["success_by_level"] = report["success_by_level"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    base = rows[0]
    print(f"{args.policy}: {args.episodes} held-out greedy episodes")
    print("| weights | MiB | decode tok/s, 1 row | 8 rows | success | vs fp32 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        delta = r["success_rate"] - base["success_rate"]
        print(f"| {r['quantize']} | {r['mib']:.0f} | {r['tok_s_1']:.1f} | {r['tok_s_8']:.1f} | "
              f"{r['success_rate']:.3f} | {delta:+.3f} |")  # fmt: skip
    if "bf16_copy_tok_s_1" in base:
        print(f"(fp32 through the engine's bf16 copy: {base['bf16_copy_tok_s_1']:.1f} / "
              f"{base['bf16_copy_tok_s_8']:.1f} tok/s)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
