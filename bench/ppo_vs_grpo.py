"""PPO vs GRPO: seconds per RL step at equal episodes, and peak memory with and without
gradient checkpointing. A benchmark, not a test: it prints figures and checks nothing.

Each configuration runs ``agentrl.train.train`` in its own fresh process (so peak memory
is that configuration's own): no warm start, no evaluation, the same task instances (same
seed), ``--groups x --group-size`` episodes per step. GRPO runs with ``truncation=zero`` so
both algorithms train on every episode. Per-step figures come from ``metrics.jsonl``; the
first step is a warm-up and is left out of the medians. Episodes differ between runs (sampling),
so the fair update figure is seconds per 1k trained tokens (whole sequences: prompt, tool
output and policy tokens all go through the forward and backward pass).

Peak memory: on CUDA, ``torch.cuda.max_memory_allocated``; on CPU, the process's peak
resident set (``ru_maxrss``), which includes the model, the rollout and Python itself, so
compare the configurations with each other rather than reading one alone.

    python bench/ppo_vs_grpo.py                      # 4 configurations, 3 steps each
    python bench/ppo_vs_grpo.py --steps 4 --json ppo_vs_grpo.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGS = {
    "grpo": ["algo.name=grpo", "algo.truncation=zero"],
    "ppo": ["algo.name=ppo"],
    "grpo+ckpt": ["algo.name=grpo", "algo.truncation=zero", "train.gradient_checkpointing=true"],
    "ppo+ckpt": ["algo.name=ppo", "train.gradient_checkpointing=true"],
}


def _overrides(args, run_dir: Path) -> list[str]:
    return [
        f"model.name={args.model}",
        f"model.device={args.device}",
        f"train.run_dir={run_dir}",
        f"train.steps={args.steps}",
        f"train.seed={args.seed}",
        "train.eval_episodes=0",
        "train.warmstart_demos=0",
        "train.save_model=false",
        "train.checkpoint_every=0",
        f"rollout.groups_per_step={args.groups}",
        f"rollout.group_size={args.group_size}",
        f"rollout.max_new_tokens={args.max_new_tokens}",
        f"rollout.max_total_tokens={args.max_total_tokens}",
        f"algo.minibatches={args.minibatches}",
    ]


def run_one(args) -> dict:
    """Child process: train one configuration, return its figures."""
    import torch

    from agentrl.config import build_config
    from agentrl.monitor.metrics import read_jsonl
    from agentrl.train import train

    if args.threads:
        torch.set_num_threads(args.threads)
    run_dir = Path(args.out) / args.one
    cfg = build_config({}, _overrides(args, run_dir) + CONFIGS[args.one])
    cuda = cfg.model.device.startswith("cuda") or (
        cfg.model.device == "auto" and torch.cuda.is_available()
    )
    t0 = time.time()
    train(cfg, progress=False)
    wall = time.time() - t0
    lines = read_jsonl(run_dir / "metrics.jsonl")
    timed = lines[1:] or lines  # the first step is a warm-up
    step_s = [m["time/step_s"] for m in timed]
    rollout_s = [m["time/rollout_s"] for m in timed]
    update_s = [s - r for s, r in zip(step_s, rollout_s, strict=True)]
    tokens = [m["rollout/total_tokens"] for m in timed]  # what a forward/backward costs
    out = {
        "config": args.one,
        "episodes_per_step": lines[0]["rollout/episodes"],
        "step_s": statistics.median(step_s),
        "rollout_s": statistics.median(rollout_s),
        "update_s": statistics.median(update_s),
        "update_s_per_1k_tokens": 1000 * sum(update_s) / max(sum(tokens), 1),
        "tokens_per_step": statistics.median(tokens),
        "policy_tokens_per_step": statistics.median(m["rollout/policy_tokens"] for m in timed),
        "mean_turns": statistics.median(m["rollout/mean_turns"] for m in timed),
        "wall_s": wall,
        "device": "cuda" if cuda else "cpu",
    }
    if cuda:
        out["peak_mem_mb"] = torch.cuda.max_memory_allocated() / 2**20
    else:
        out["peak_mem_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="agentrl/tiny")
    ap.add_argument("--device", default="auto")
    ap.add_argument(
        "--steps", type=int, default=3, help="RL steps per configuration (1st = warm-up)"
    )
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--minibatches", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--max-total-tokens", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset")
    ap.add_argument("--json", dest="json_path", default=None, help="also write results here")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run_one(args)), flush=True)
        return
    results = []
    with tempfile.TemporaryDirectory() as out:
        for name in args.configs.split(","):
            cmd = [sys.executable, __file__, "--one", name, "--out", out]
            for key in ("model", "device", "steps", "groups", "group_size", "minibatches",
                        "max_new_tokens", "max_total_tokens", "seed", "threads"):  # fmt: skip
                cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
            results.append(json.loads(line[len("RESULT ") :]))
            print(f"done: {name}", file=sys.stderr)
    load = os.getloadavg()
    print(
        f"\nPPO vs GRPO on {args.model} ({results[0]['device']}), {results[0]['episodes_per_step']}"
        f" episodes/step, {args.steps} steps (first = warm-up), medians; "
        f"loadavg {load[0]:.1f}"
    )
    head = f"{'config':<11}{'step s':>8}{'rollout s':>11}{'update s':>10}"
    head += f"{'upd s/1k tok':>14}{'tokens':>8}{'policy tok':>12}{'peak MB':>9}"
    print(head)
    for r in results:
        print(
            f"{r['config']:<11}{r['step_s']:>8.2f}{r['rollout_s']:>11.2f}{r['update_s']:>10.2f}"
            f"{r['update_s_per_1k_tokens']:>14.3f}{r['tokens_per_step']:>8.0f}"
            f"{r['policy_tokens_per_step']:>12.0f}"
            f"{r['peak_mem_mb']:>9.0f}"
        )
    by = {r["config"]: r for r in results}
    if "ppo" in by and "grpo" in by:
        key = "update_s_per_1k_tokens"
        print(
            f"PPO/GRPO update time per 1k trained tokens: {by['ppo'][key] / by['grpo'][key]:.2f}x"
        )
    for algo in ("grpo", "ppo"):
        if algo in by and f"{algo}+ckpt" in by:
            a, b = by[algo]["peak_mem_mb"], by[f"{algo}+ckpt"]["peak_mem_mb"]
            print(f"{algo}: peak memory {a:.0f} MB -> {b:.0f} MB with gradient checkpointing")
    if args.json_path:
        Path(args.json_path).write_text(
            json.dumps({"args": vars(args), "results": results}, indent=2)
        )


if __name__ == "__main__":
    main()
