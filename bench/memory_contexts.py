"""One run's weights on a long-horizon family, played with three contexts: hierarchical memory,
the whole history, and the last turns alone (memory with no note: no warm records, no recall).

The ablation behind issue 16's "success with memory vs full history vs truncated history": the
same weights and held-out seeds (greedy), only what the prompt holds changes. ``--modes``
picks some of ``memory``, ``last``, ``full``; ``memory`` and ``last`` use the run's
``rollout.memory`` (or its defaults when the run trained without memory) with its hot turns
and rewrite period; ``full`` plays the whole history within ``--full-tokens`` (the ledger's
level 3 needs ~5,500 of SmolLM2's 8,192 positions). Prints success overall and per level, how
episodes ended (answer, max_turns, length) and seconds. Not a test: prints figures.

    python bench/memory_contexts.py runs/ledger_ws_memory --json /tmp/contexts.json
    python bench/memory_contexts.py runs/ledger_ws_full --weights start --modes full,memory
"""

from __future__ import annotations

import argparse
import json
import time

from agentrl.config.memory import MemoryConfig
from agentrl.eval.api import evaluate_model, run_settings

MODES = ("memory", "last", "full")


def context_settings(settings: dict, mode: str, full_tokens: int) -> dict:
    """``run_eval`` keyword settings for one context ``mode`` from a run's own settings."""
    memory = settings.get("memory") or MemoryConfig(enabled=True)
    out = {k: v for k, v in settings.items() if k != "memory"}
    if mode == "memory":
        out["memory"] = memory.model_copy(update={"enabled": True})
    elif mode == "last":  # the hot turns verbatim, nothing of the older ones
        out["memory"] = memory.model_copy(update={"enabled": True, "warm_turns": 0,
                                                  "cold_top_k": 0})  # fmt: skip
    elif mode == "full":
        out["max_total_tokens"] = max(full_tokens, settings.get("max_total_tokens", 0))
    else:
        raise ValueError(f"--modes: unknown mode {mode!r} (choose from {', '.join(MODES)})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="a run directory (its config.yaml and weights)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: memory,last,full")
    ap.add_argument("--episodes", type=int, default=96)
    ap.add_argument("--weights", default="final", help="final, or start (after the warm start)")
    ap.add_argument("--full-tokens", type=int, default=6144, help="token budget of 'full'")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    settings = run_settings(args.run_dir)
    if not settings:
        raise SystemExit(f"{args.run_dir}: not a run directory (no config.yaml)")
    results = {}
    for mode in args.modes.split(","):
        kwargs = context_settings(settings, mode.strip(), args.full_tokens)
        t0 = time.perf_counter()
        report, trajs = evaluate_model(args.run_dir, episodes=args.episodes,
                                       weights=args.weights, **kwargs)  # fmt: skip
        results[mode] = {
            "success": report["success_rate"],
            "per_level": report["success_by_level"],
            "terminations": report["terminations"],
            "mean_turns": report["mean_turns"],
            "seconds": round(time.perf_counter() - t0, 1),
            "max_total_tokens": kwargs["max_total_tokens"],
        }
        print(f"{mode:7s} success {report['success_rate']:.3f}  levels "
              f"{report['success_by_level']}  ends {report['terminations']}  "
              f"{results[mode]['seconds']:.0f} s", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"run_dir": args.run_dir, "weights": args.weights, **results}, f,
                      indent=2)  # fmt: skip


if __name__ == "__main__":
    main()
