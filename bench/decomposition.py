"""Decomposition accuracy of finished runs, before and after RL, from their held-out episodes.

For each run directory, reads ``eval_before.jsonl`` and ``eval_after.jsonl`` (the held-out
episodes the trainer wrote, in the order of their seeds) and prints success, the call
decomposition accuracy (the share of the reference's sub-tasks the episode's own calls made,
in order: ``agentrl.eval.decomposition``), the share of episodes whose first call names the
needed tool (overall, by level and, for the library, by family: among distractors it
separates choosing the tool from using it) and, for plan-and-execute runs, the plan's
decomposition accuracy. Episodes are drawn again with the run's own env settings
(``task.env_kwargs``). Not a test: prints figures.

    python bench/decomposition.py runs/smollm2_weather_last3 runs/smollm2_weather_plan
    python bench/decomposition.py runs/smollm2_dynamic_l1demos runs/smollm2_dynamic_l1demos_lora
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

from agentrl.config import load_config
from agentrl.eval.decomposition import call_decomposition
from agentrl.eval.runner import eval_specs
from agentrl.train.build import env_factory


def run_figures(run: Path) -> list[dict]:
    cfg = load_config(run / "config.yaml")
    levels = list(cfg.train.eval_levels or cfg.task.levels)
    make_env = env_factory(cfg)
    rows = []
    for when in ("before", "after"):
        path = run / f"eval_{when}.jsonl"
        if not path.is_file():
            continue
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        specs = eval_specs(len(records), levels, cfg.train.eval_seed)
        trajs = [SimpleNamespace(task_id=r.get("task_id", ""), tool_calls=r.get("tool_calls", []))
                 for r in records]  # fmt: skip
        calls = call_decomposition(trajs, specs, make_env)
        plans = [r["reward"]["layers"]["plan"] for r in records if "plan" in r["reward"]["layers"]]
        rows.append({
            "run": str(run), "when": when, "mode": cfg.rollout.mode, "episodes": len(records),
            "success": sum(r["success"] for r in records) / len(records),
            "call_decomposition_accuracy": calls.get("call_decomposition_accuracy"),
            "first_tool_rate": calls.get("first_tool_rate"),
            "first_tool_by_level": calls.get("first_tool_by_level"),
            "first_tool_by_family": calls.get("first_tool_by_family"),
            "plan_decomposition_accuracy": sum(plans) / len(plans) if plans else None,
        })  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="Run directories.")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = [row for run in args.runs for row in run_figures(Path(run))]
    print("| run | mode | when | success | call decomposition | first call's tool right "
          "(by level) | plan decomposition |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        plan, first = r["plan_decomposition_accuracy"], r["first_tool_rate"]
        by_level = " / ".join(f"{v:.2f}" for v in (r["first_tool_by_level"] or {}).values())
        print(f"| {r['run']} | {r['mode']} | {r['when']} | {r['success']:.3f} | "
              f"{r['call_decomposition_accuracy']:.3f} | "
              f"{'-' if first is None else f'{first:.3f} ({by_level})'} | "
              f"{'-' if plan is None else f'{plan:.3f}'} |")  # fmt: skip
    for r in rows:
        if r["first_tool_by_family"]:
            families = ", ".join(f"{k} {v:.2f}" for k, v in r["first_tool_by_family"].items())
            print(f"{r['run']} {r['when']}: first call's tool right by family: {families}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
