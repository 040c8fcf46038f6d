"""Offline RL from a run's logs: DPO and IQL on the episodes a GRPO run logged, no new rollouts.

    python examples/offline_rl.py                   # the tiny local model: 4 GRPO steps, then both
    python examples/offline_rl.py --run runs/demo   # an existing run's trajectories.jsonl

The same from the command line::

    agentrl offline runs/demo --algo iql --out runs/demo_iql
    agentrl offline runs/demo --algo dpo --out runs/demo_dpo --epochs 4
    agentrl export-data runs/demo --format dpo --out data/demo_dpo

Every logged episode carries its token ids, loss mask and rollout log-probs, so training reads
back exactly what the policy saw and sampled. DPO pairs episodes of one task instance (the
best over the worst); IQL fits V (expectile) and Q (TD) per assistant turn on the frozen
policy's hidden states and imitates each turn weighted by exp(beta (Q - V)). Each prints its
held-out success before and after, on the run's evaluation seeds.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from agentrl.config import build_config
from agentrl.offline.dpo import log_pairs
from agentrl.offline.logs import load_logs
from agentrl.offline.train import offline_config, offline_train
from agentrl.train import train


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", help="A run directory to learn from (default: a fresh tiny run).")
    p.add_argument("--steps", type=int, default=4, help="GRPO steps of the fresh run.")
    p.add_argument("--eval-episodes", type=int, default=24)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.run) if args.run else Path(tmp) / "grpo"
        if not args.run:
            train(build_config({}, [
                f"train.run_dir={run}", f"train.steps={args.steps}", "train.warmstart_demos=32",
                "train.eval_episodes=0", "train.general_check=false",
                "rollout.group_size=4", "rollout.groups_per_step=4",
            ]), progress=False)  # fmt: skip
        trajs = [e.traj for e in load_logs([run])]
        print(f"{len(trajs)} logged episodes, {len(log_pairs(trajs))} preference pairs")
        sets = [f"train.eval_episodes={args.eval_episodes}", "train.general_check=false"]
        for algo, epochs in (("iql", 2), ("dpo", 4)):
            cfg = offline_config([run], Path(tmp) / algo, overrides=sets)
            s = offline_train(cfg, [run], algo, epochs=epochs)
            took = s["offline"]["offline/train_s"]
            print(f"{algo}: held-out success {s['success_before']:.3f} -> "
                  f"{s['success_after']:.3f} ({took:.1f} s of training)")  # fmt: skip


if __name__ == "__main__":
    main()
