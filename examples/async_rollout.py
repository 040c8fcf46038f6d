"""Asynchronous rollout: a worker thread plays the next steps' episodes while the trainer updates.

    python examples/async_rollout.py                    # the tiny local model, 6 GRPO steps
    python examples/async_rollout.py --staleness 2 --model agentrl/smollm2-135m

The same run from the command line: ``agentrl train configs/weather_grpo.yaml --set
rollout.max_staleness=1``. Each step here prints how many updates old the weights that played
its episodes were (``rollout/staleness``: step j is played by the weights after max(0, j - s)
updates), the mean truncated importance weight that corrects them (``rollout/is_weight_mean``,
``min(pi_prox / mu, rollout.is_cap)``), the mean log-prob gap between the two policies, and
how long the trainer waited for the episodes vs how long the worker played them.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from agentrl.config import build_config
from agentrl.train import train


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="agentrl/tiny")
    p.add_argument("--staleness", type=int, default=1, help="rollout.max_staleness")
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cfg = build_config({}, [
            f"model.name={args.model}", f"train.run_dir={run}", f"train.steps={args.steps}",
            "train.warmstart_demos=32", "train.eval_episodes=0", "train.general_check=false",
            "rollout.group_size=4", "rollout.groups_per_step=2",
            f"rollout.max_staleness={args.staleness}",
        ])  # fmt: skip
        train(cfg, progress=False)
        for line in (run / "metrics.jsonl").read_text().splitlines():
            m = json.loads(line)
            print(f"step {m['step']}: staleness {m['rollout/staleness']:.0f}  "
                  f"importance weight {m['rollout/is_weight_mean']:.3f}  "
                  f"log-prob gap {m['rollout/logprob_gap']:.4f}  "
                  f"success {m['rollout/success_rate']:.2f}  waited "
                  f"{m['time/rollout_s']:.1f} s for episodes played in "
                  f"{m['time/rollout_play_s']:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
