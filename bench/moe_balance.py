"""Expert utilization of the tiny Mixture-of-Experts model under GRPO, per load-balancing
coefficient: the same run with ``algo.moe_aux_coef`` = 0, 0.01 and 0.05.

    python bench/moe_balance.py --json moe_balance.json --plot moe_balance.png

Each run is ``agentrl train`` (``agentrl.train.train``) on the weather task from the same
upcycled tiny MoE (``agentrl/tiny-moe``: 4 experts, top-2, ``agentrl.tiny.moe``), same seed,
no warm start and no evaluation; only the coefficient differs. The figures come from each
run's ``metrics.jsonl``: ``moe/expert_share/<layer>/<e>`` (fraction of the policy tokens with
expert e among their top-2: 0.5 each when balanced), ``moe/router_entropy/<layer>`` (ln 4 =
1.386 at uniform routing), ``moe/aux_loss`` (1 when balanced) and ``moe/collapse_share``.
The plot has a row per coefficient and a column per layer: each expert's share over the steps.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shlex
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from agentrl.config import build_config
from agentrl.monitor.metrics import read_jsonl
from agentrl.train import train


def run_one(args, coef: float, run_dir: Path, threads: int = 0) -> tuple[list[dict], float]:
    """One GRPO run with ``algo.moe_aux_coef=coef``: (its metrics.jsonl records, seconds).
    ``threads`` > 0: torch threads of this process (runs side by side, ``--jobs``)."""
    if threads:
        torch.set_num_threads(threads)
    t0 = time.time()
    overrides = [
        f"model.name={args.model}", f"train.run_dir={run_dir}", f"train.steps={args.steps}",
        f"algo.moe_aux_coef={coef}", f"algo.lr={args.lr}", "train.eval_episodes=0",
        "train.warmstart_demos=0", "train.save_model=false", "task.env=weather",
        "task.max_turns=4", f"rollout.group_size={args.group_size}",
        f"rollout.groups_per_step={args.groups}", "rollout.max_new_tokens=48",
        "rollout.max_total_tokens=768", "rollout.dtype=float32", "train.autocast=off",
        f"train.seed={args.seed}",
    ]  # fmt: skip
    train(build_config({}, overrides), progress=False)
    return read_jsonl(run_dir / "metrics.jsonl"), round(time.time() - t0, 1)


def summarize(records: list[dict]) -> dict:
    """Per-step series and the end-of-run figures of one run."""
    layers = sorted({int(k.split("/")[2]) for k in records[0] if k.startswith("moe/expert_")})
    experts = sorted({int(k.split("/")[3]) for k in records[0] if k.startswith("moe/expert_")})
    shares = {
        str(layer): [[r[f"moe/expert_share/{layer}/{e}"] for r in records] for e in experts]
        for layer in layers
    }
    entropy = {str(layer): [r[f"moe/router_entropy/{layer}"] for r in records] for layer in layers}
    last = records[-1]
    final_max = max(last[f"moe/expert_share/{layer}/{e}"] for layer in layers for e in experts)
    final_min = min(last[f"moe/expert_share/{layer}/{e}"] for layer in layers for e in experts)
    return {
        "expert_share": shares,
        "router_entropy": entropy,
        "aux_loss": [r["moe/aux_loss"] for r in records],
        "collapse_share": [r.get("moe/collapse_share") for r in records],
        "reward": [r["reward/total"] for r in records],
        "final": {
            "max_expert_share": final_max,
            "min_expert_share": final_min,
            "router_entropy": {str(layer): entropy[str(layer)][-1] for layer in layers},
            "mean_router_entropy": sum(entropy[str(la)][-1] for la in layers) / len(layers),
            "aux_loss": last["moe/aux_loss"],
            "collapse_share": last.get("moe/collapse_share"),
            "reward": last["reward/total"],
        },
    }


def plot(results: dict, path: str) -> None:
    """A row per coefficient, a column per layer: each expert's share over the steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    coefs = list(results)
    layers = list(results[coefs[0]]["expert_share"])
    fig, axes = plt.subplots(len(coefs), len(layers), figsize=(4 * len(layers), 2.8 * len(coefs)),
                             sharex=True, sharey=True, squeeze=False)  # fmt: skip
    for i, coef in enumerate(coefs):
        for j, layer in enumerate(layers):
            ax = axes[i][j]
            for e, series in enumerate(results[coef]["expert_share"][layer]):
                ax.plot(range(1, len(series) + 1), series, marker="o", ms=3, label=f"expert {e}")
            ax.axhline(0.5, color="grey", lw=0.8, ls="--")  # balanced top-2 of 4
            ax.set_ylim(0, 1)
            ax.set_title(f"moe_aux_coef={coef}  layer {layer}", fontsize=9)
            if j == 0:
                ax.set_ylabel("share of policy tokens")
            if i == len(coefs) - 1:
                ax.set_xlabel("GRPO step")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="agentrl/tiny-moe")
    ap.add_argument("--coefs", type=float, nargs="+", default=[0.0, 0.01, 0.05])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side (processes)")
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--plot", default=None, help="write the utilization plot here (PNG)")
    args = ap.parse_args()
    results, seconds = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        threads = max(1, (os.cpu_count() or 1) // args.jobs) if args.jobs > 1 else 0
        with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as pool:
            futures = [pool.submit(run_one, args, c, Path(tmp) / f"coef_{c}", threads)
                       for c in args.coefs]  # fmt: skip
            done = [f.result() for f in futures]
        for coef, (records, secs) in zip(args.coefs, done, strict=True):
            results[str(coef)], seconds[str(coef)] = summarize(records), secs
            f = results[str(coef)]["final"]
            print(f"moe_aux_coef={coef}: max share {f['max_expert_share']:.3f}, min share "
                  f"{f['min_expert_share']:.3f}, router entropy {f['mean_router_entropy']:.3f}, "
                  f"aux {f['aux_loss']:.4f}, reward {f['reward']:.3f} "
                  f"({seconds[str(coef)]} s)", flush=True)  # fmt: skip
    out = {"command": shlex.join([sys.executable.split("/")[-1], *sys.argv]),
           "settings": vars(args), "seconds": seconds, "runs": results}  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
