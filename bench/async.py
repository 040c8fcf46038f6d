"""Synchronous vs asynchronous rollout: seconds per RL step and success vs training seconds,
with tools that take realistic time. A benchmark, not a test: it prints figures.

Every tool call sleeps ``--tool-latency`` seconds (200 ms by default: a web API), so a rollout
waits on its tools while, in the asynchronous run (``rollout.max_staleness``), the trainer
computes the previous step's update. One warm start (``--warmstart-demos`` reference
demonstrations) is shared: both runs start from its saved model, with the same seeds,
``--steps`` GRPO steps and the same held-out evaluation (greedy, ``--eval-episodes``) before
and after. Seconds per step: the RL phase's wall clock (evaluations excluded) over the steps;
the asynchronous run's worker plays nothing while an evaluation runs that it could not also
play synchronously, since evaluations happen only before the first and after the last step.

    python bench/async.py --json async.json
    python bench/async.py --model agentrl/smollm2-135m --steps 4 --group-size 4 --groups 2

OUT.json: ``sync_s_per_step``, ``async_s_per_step``, ``speedup`` and each run's curve
(``[training seconds, held-out success]``) and per-step times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agentrl.config import build_config
from agentrl.envs import make, register
from agentrl.train import train

SLOW_ENV = "bench_slow_tools"


class ToolLatency:
    """An env whose every tool call takes ``seconds`` longer (a sleep after its step)."""

    def __init__(self, env: Any, seconds: float) -> None:
        self.env, self.seconds = env, seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def step(self, action_text: str):
        out = self.env.step(action_text)
        time.sleep(self.seconds * len(out[4].get("tool_calls", [])))
        return out


def _overrides(args, run_dir: Path, model: str, extra: list[str]) -> list[str]:
    return [
        f"model.name={model}",
        f"task.env={SLOW_ENV}",
        f"train.run_dir={run_dir}",
        f"train.seed={args.seed}",
        f"train.eval_episodes={args.eval_episodes}",
        "train.general_check=false",
        "train.checkpoint_every=0",
        f"rollout.group_size={args.group_size}",
        f"rollout.groups_per_step={args.groups}",
        *extra,
    ]


def warm_model(args, root: Path) -> str:
    """The shared warm start: ``--warmstart-demos`` demonstrations, saved; its directory."""
    run = root / "warm"
    train(build_config({}, _overrides(args, run, args.model, [
        "train.steps=0", "train.eval_episodes=0", f"train.warmstart_demos={args.warmstart_demos}",
    ])), progress=False)  # fmt: skip
    return str(run / "model")


def rl_run(args, root: Path, model: str, staleness: int) -> dict[str, Any]:
    """One RL run from the warm model; its per-step seconds and its two curve points."""
    run = root / f"staleness_{staleness}"
    cfg = build_config({}, _overrides(args, run, model, [
        f"train.steps={args.steps}", "train.warmstart_demos=0",
        f"rollout.max_staleness={staleness}",
    ]))  # fmt: skip
    marks: list[float] = []
    summary = train(cfg, progress=False, on_step=lambda _n: marks.append(time.time()))
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rl_s = sum(m["time/step_s"] for m in metrics)  # each step, waiting for its rollout included
    wall_s = marks[-1] - marks[0] + metrics[0]["time/step_s"]  # the RL phase's wall clock
    before, after = summary["eval_before"], summary["eval_after"]
    return {
        "staleness": staleness,
        "s_per_step": wall_s / args.steps,
        "step_s": [round(m["time/step_s"], 2) for m in metrics],
        "rollout_wait_s": [round(m["time/rollout_s"], 2) for m in metrics],
        "rollout_play_s": [
            round(m.get("time/rollout_play_s", m["time/rollout_s"]), 2) for m in metrics
        ],  # fmt: skip
        "steps_s_sum": rl_s,
        "curve": [[0.0, before["success_rate"]], [round(wall_s, 1), after["success_rate"]]],
        "success_by_level_after": after["success_by_level"],
        "train_success": [m["rollout/success_rate"] for m in metrics],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="agentrl/tiny")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--staleness", type=int, default=1, help="rollout.max_staleness (async)")
    p.add_argument("--tool-latency", type=float, default=0.2, help="seconds per tool call")
    p.add_argument("--warmstart-demos", type=int, default=64)
    p.add_argument("--eval-episodes", type=int, default=96)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args()
    latency = args.tool_latency
    register(SLOW_ENV, lambda **kw: ToolLatency(make("weather", **kw), latency))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = warm_model(args, root)
        runs = {name: rl_run(args, root, model, s)
                for name, s in (("sync", 0), ("async", args.staleness))}  # fmt: skip
    out = {
        "model": args.model, "steps": args.steps,
        "episodes_per_step": args.groups * args.group_size, "tool_latency_s": latency,
        "max_staleness": args.staleness,
        "sync_s_per_step": runs["sync"]["s_per_step"],
        "async_s_per_step": runs["async"]["s_per_step"],
        "speedup": runs["sync"]["s_per_step"] / runs["async"]["s_per_step"],
        "runs": runs,
    }  # fmt: skip
    for name, r in runs.items():
        print(f"{name:5s}  {r['s_per_step']:6.1f} s/step  steps {r['step_s']}  "
              f"rollout played {r['rollout_play_s']}  waited {r['rollout_wait_s']}")  # fmt: skip
        print(f"       held-out success vs training seconds: {r['curve']} "
              f"{r['success_by_level_after']}")  # fmt: skip
    print(
        f"speedup {out['speedup']:.2f}x (sync {out['sync_s_per_step']:.1f} s/step, async "
        f"{out['async_s_per_step']:.1f} s/step, {latency * 1000:.0f} ms a tool call)"
    )
    print(f"median step: sync {statistics.median(runs['sync']['step_s']):.1f} s, async "
          f"{statistics.median(runs['async']['step_s']):.1f} s")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
