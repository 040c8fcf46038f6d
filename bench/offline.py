"""Offline RL (DPO, IQL) vs online GRPO at equal training seconds, from the same logs.

A benchmark, not a test: it prints figures and checks nothing. Every stage is an ``agentrl``
command in its own process, printed before it runs, and skipped when its output already exists
(so an interrupted run continues where it stopped):

1. **logs**: ``agentrl train CONFIG`` from ``--start`` (a run directory or model path) for
   ``--log-steps`` GRPO steps, no evaluation, after a warm start on ``--warmstart-demos``
   reference demonstrations when that is above 0. Its
   ``trajectories.jsonl`` (token-exact) are the logs; its final model M0 is where every arm
   starts.
2. **dpo** and **iql**: ``agentrl offline logs --algo dpo|iql`` from M0 on those logs
   (``--epochs`` passes), no evaluation; their training seconds are ``offline/train_s``.
3. **grpo**: ``agentrl train`` from M0 online (fresh task instances: ``train.seed`` + 1) for as
   many steps as fit the larger offline arm's seconds at the logging run's median seconds per
   step (at least one), no evaluation.
4. **eval**: ``agentrl eval`` on M0 and on each arm's final model: the same ``--episodes``
   greedy held-out episodes (seeds from 10000), success overall and per level.

    python bench/offline.py --start agentrl/smollm2-135m --warmstart-demos 64 \\
        --out runs/offline_bench --json runs/offline_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from agentrl.monitor.metrics import read_jsonl

ARMS = ("dpo", "iql", "grpo")


def _agentrl(*args: str) -> None:
    cmd = [sys.executable, "-m", "agentrl.cli", *args]
    print("$ agentrl " + " ".join(args), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, env=os.environ.copy())


def _model_of(start: str) -> str:
    path = Path(start)
    return str(path / "model") if (path / "model").is_dir() else start


def _metrics(run_dir: Path) -> list[dict]:
    return read_jsonl(run_dir / "metrics.jsonl")


def _train(args, run_dir: Path, model: str, steps: int, seed: int, demos: int = 0) -> None:
    if (run_dir / "model").is_dir():
        return
    sets = [f"model.name={model}", f"train.run_dir={run_dir}", f"train.steps={steps}",
            f"train.seed={seed}", f"train.warmstart_demos={demos}", "train.eval_episodes=0",
            "train.eval_every=0", "train.general_check=false", "train.checkpoint_every=0",
            "algo.name=grpo"]  # fmt: skip
    _agentrl("train", args.config, "--quiet", *[x for s in sets for x in ("--set", s)])


def _offline(args, logs: Path, algo: str) -> float:
    out = Path(args.out) / algo
    if not (out / "model").is_dir():
        _agentrl("offline", str(logs), "--algo", algo, "--out", str(out),
                 "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                 "--set", "train.eval_episodes=0", "--set", "train.eval_every=0")  # fmt: skip
    return float(_metrics(out)[0]["offline/train_s"])


def _evaluate(args, name: str, policy: Path) -> dict:
    out = Path(args.out) / f"eval_{name}"
    if not (out / "report.json").is_file():
        _agentrl("eval", str(policy), "--episodes", str(args.episodes), "--out", str(out))
    return json.loads((out / "report.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--start", required=True, help="run directory or model path")
    ap.add_argument(
        "--warmstart-demos",
        type=int,
        default=0,
        help="warm-start the logging run on this many reference demonstrations "
        "first (the config's warm-start lr and epochs); 0: --start already is",
    )
    ap.add_argument("--config", default="configs/smollm2_weather.yaml")
    ap.add_argument("--out", required=True, help="directory of the stages' run directories")
    ap.add_argument("--log-steps", type=int, default=4, help="GRPO steps that write the logs")
    ap.add_argument("--epochs", type=int, default=1, help="offline passes over the logs")
    ap.add_argument("--batch-size", type=int, default=8, help="pairs or rows per offline step")
    ap.add_argument("--episodes", type=int, default=96, help="held-out episodes per model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", dest="json_path", default=None, help="also write results here")
    args = ap.parse_args()
    root = Path(args.out)
    logs = root / "logs"
    _train(args, logs, _model_of(args.start), args.log_steps, args.seed, args.warmstart_demos)
    log_steps = _metrics(logs)
    step_s = statistics.median(m["time/step_s"] for m in log_steps)
    seconds = {algo: _offline(args, logs, algo) for algo in ("dpo", "iql")}
    grpo_steps = max(1, round(max(seconds.values()) / step_s))
    _train(args, root / "grpo", str(logs / "model"), grpo_steps, args.seed + 1)
    seconds["grpo"] = sum(m["time/step_s"] for m in _metrics(root / "grpo"))
    reports = {"start": _evaluate(args, "start", logs)}
    reports |= {arm: _evaluate(args, arm, root / arm) for arm in ARMS}
    rows = []
    for arm, rep in reports.items():
        rows.append({"arm": arm, "train_s": seconds.get(arm, 0.0),
                     "success": rep["success_rate"], "by_level": rep["success_by_level"],
                     "mean_reward": rep.get("mean_reward")})  # fmt: skip
    logged = sum(m["rollout/episodes"] for m in log_steps)
    load = os.getloadavg()[0]
    print(f"\nfrom {args.start}: {logged:.0f} logged episodes ({len(log_steps)} GRPO steps, "
          f"median {step_s:.0f} s/step); GRPO arm {grpo_steps} steps; "
          f"{args.episodes} greedy held-out episodes each; loadavg {load:.1f}")  # fmt: skip
    print(f"{'arm':<7}{'train s':>9}{'success':>9}  per level")
    for r in rows:
        levels = " ".join(f"L{k} {v:.2f}" for k, v in sorted(r["by_level"].items()))
        print(f"{r['arm']:<7}{r['train_s']:>9.0f}{r['success']:>9.3f}  {levels}")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(
            {"args": vars(args), "logged_episodes": logged, "log_step_s": step_s,
             "grpo_steps": grpo_steps, "results": rows}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
