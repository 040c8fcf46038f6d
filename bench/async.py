"""Synchronous vs asynchronous rollout: seconds per RL step and success vs training seconds,
with tools that take realistic time. A benchmark, not a test: it prints figures.

Every tool call sleeps ``--tool-latency`` seconds (200 ms by default: a web API;
``bench/slow_tools.py``), so a rollout waits on its tools while, asynchronously
(``rollout.max_staleness=1``), the trainer computes the previous step's update. Modes: ``sync``;
``async``, the rollout in a worker thread of the trainer's process; ``async_ray``, the rollout
in one Ray actor (its own process, so its Python does not share the trainer's interpreter lock).
One warm start (``--warmstart-demos`` reference demonstrations) is shared: every run starts from
its saved model, with the same seeds and ``--steps`` GRPO steps. Seconds per step: the RL
phase's wall clock from the end of step 0 to the end of the last step, over ``steps - 1``
(step 0 is a warm-up: nothing overlaps it, and a Ray actor starts during it). Held-out success
(greedy, ``--eval-episodes``, the same seeds) is measured on the saved models afterwards, on
plain weather (no sleeps), so evaluations cost the runs nothing.

    python bench/async.py --json async.json
    python bench/async.py --modes sync async --steps 6

OUT.json: ``sync_s_per_step``, ``async_s_per_step``, ``speedup`` (sync / async), the same for
``async_ray`` when run, and per run its curve ``[[0, success before], [RL seconds, after]]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from agentrl.config import build_config
from agentrl.eval.api import evaluate_model
from agentrl.monitor.metrics import read_jsonl
from agentrl.train import train

SLOW_ENV = "weather_slow_tools"  # bench/slow_tools.py
PLUGIN = Path(__file__).resolve().parent / "slow_tools.py"
MODES = {  # name -> its overrides
    "sync": ["rollout.max_staleness=0"],
    "async": ["rollout.max_staleness=1"],
    "async_ray": ["rollout.max_staleness=1", "rollout.backend=ray", "rollout.workers=1"],
}


def _overrides(args, run_dir: Path, model: str, extra: list[str]) -> list[str]:
    return [
        f"model.name={model}",
        f"task.env={SLOW_ENV}",
        f"task.imports=[{PLUGIN}]",
        f"task.env_kwargs={{latency: {args.tool_latency}}}",
        f"train.run_dir={run_dir}",
        f"train.seed={args.seed}",
        "train.eval_episodes=0",
        "train.general_check=false",
        "train.checkpoint_every=0",
        f"rollout.group_size={args.group_size}",
        f"rollout.groups_per_step={args.groups}",
        *extra,
    ]


def warm_model(args, root: Path) -> str:
    """The shared warm start: ``--warmstart-demos`` demonstrations, saved; its directory."""
    run = root / "warm"
    extra = ["train.steps=0", f"train.warmstart_demos={args.warmstart_demos}"]
    train(build_config({}, _overrides(args, run, args.model, extra)), progress=False)
    return str(run / "model")


def rl_run(args, root: Path, model: str, mode: str) -> dict[str, Any]:
    """One RL run from the warm model: its seconds per step and per-step times."""
    run = root / mode
    extra = [f"train.steps={args.steps}", "train.warmstart_demos=0", *MODES[mode]]
    marks: list[float] = []
    train(build_config({}, _overrides(args, run, model, extra)), progress=False,
          on_step=lambda _n: marks.append(time.time()))  # fmt: skip
    metrics = read_jsonl(run / "metrics.jsonl")
    return {
        "model_dir": str(run / "model"),
        "s_per_step": (marks[-1] - marks[0]) / (args.steps - 1),
        "rl_s": marks[-1] - marks[0] + metrics[0]["time/step_s"],
        "step_s": [round(m["time/step_s"], 2) for m in metrics],
        "rollout_wait_s": [round(m["time/rollout_s"], 2) for m in metrics],
        "rollout_play_s": [
            round(m.get("time/rollout_play_s", m["time/rollout_s"]), 2) for m in metrics
        ],
        "train_success": [m["rollout/success_rate"] for m in metrics],
    }


def held_out(args, model_dir: str) -> dict[str, Any]:
    report, _ = evaluate_model(model_dir, task="weather", episodes=args.eval_episodes)
    return {"success": report["success_rate"], "by_level": report["success_by_level"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="agentrl/tiny")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--tool-latency", type=float, default=0.2, help="seconds per tool call")
    p.add_argument("--warmstart-demos", type=int, default=64)
    p.add_argument("--eval-episodes", type=int, default=96)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = warm_model(args, root)
        runs = {mode: rl_run(args, root, model, mode) for mode in args.modes}
        before = held_out(args, model)
        for r in runs.values():
            r["after"] = held_out(args, r.pop("model_dir"))
            r["curve"] = [[0.0, before["success"]], [round(r["rl_s"], 1), r["after"]["success"]]]
    out: dict[str, Any] = {
        "model": args.model, "steps": args.steps, "tool_latency_s": args.tool_latency,
        "episodes_per_step": args.groups * args.group_size, "before": before, "runs": runs,
    }  # fmt: skip
    for mode, r in runs.items():
        out[f"{mode}_s_per_step"] = r["s_per_step"]
        print(f"{mode:9s} {r['s_per_step']:6.1f} s/step  steps {r['step_s']}")
        print(f"{'':9s} rollout played {r['rollout_play_s']}  waited {r['rollout_wait_s']}")
        print(f"{'':9s} held-out success vs RL seconds {r['curve']} {r['after']['by_level']}")
    if "sync" in runs:
        for mode in runs.keys() - {"sync"}:
            key = "speedup" if mode == "async" else f"speedup_{mode}"
            out[key] = runs["sync"]["s_per_step"] / runs[mode]["s_per_step"]
            print(f"{key}: {out[key]:.2f}x ({args.tool_latency * 1000:.0f} ms a tool call)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
