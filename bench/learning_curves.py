"""Learning curves of finished runs, side by side: held-out success vs episodes and seconds.

    agentrl train configs/weather_grpo.yaml --set train.eval_every=5 --set train.run_dir=runs/a
    agentrl train configs/weather_grpo.yaml --set train.eval_every=5 \\
        --set curriculum.enabled=false --set train.run_dir=runs/b
    python bench/learning_curves.py runs/a runs/b --names curriculum,uniform --plot curves.png

Reads each run's ``eval.jsonl`` (written when ``train.eval_episodes > 0``; ``train.eval_every``
adds points during RL) and ``metrics.jsonl`` (training seconds, evaluation excluded). Prints a
table per run, then for a success target (``--target``, default: the best success every run
reached) the episodes, steps and training seconds each run needed to first reach it, and the
ratio to the first run (above 1: that run needed more). The last line is a JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys

from agentrl.monitor.curves import (
    first_reaching,
    format_curve,
    load_curve,
    plot_curves,
    shared_target,
)


def _fmt(value: float | int | None) -> str:
    if value is None:
        return "never"
    return f"{value:.0f}" if isinstance(value, float) else str(value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("runs", nargs="+", help="Run directories (the first is the reference).")
    ap.add_argument("--names", help="Comma-separated labels, one per run (default: the paths).")
    ap.add_argument("--target", type=float, help="Success level to compare costs at.")
    ap.add_argument("--plot", help="Write success vs episodes and vs seconds to this image.")
    args = ap.parse_args()
    names = args.names.split(",") if args.names else list(args.runs)
    if len(names) != len(args.runs):
        ap.error(f"--names has {len(names)} labels for {len(args.runs)} runs")
    try:
        curves = {n: load_curve(r) for n, r in zip(names, args.runs, strict=True)}
    except FileNotFoundError as err:
        sys.exit(f"learning_curves: {err}")
    for name, curve in curves.items():
        print(format_curve(name, curve))
    target = args.target if args.target is not None else shared_target(list(curves.values()))
    ref = names[0]
    print(f"\nfirst reaching held-out success >= {target:.3f} (ratio = run / {ref})")
    reached: dict[str, dict] = {}
    for name, curve in curves.items():
        row = {x: first_reaching(curve, target, x) for x in ("step", "episodes", "train_s")}
        for x in ("episodes", "train_s"):
            base = first_reaching(curves[ref], target, x)
            row[f"{x}_ratio"] = row[x] / base if row[x] is not None and base else None
        reached[name] = row
        ratio = row["episodes_ratio"]
        print(f"  {name:>12}: step {_fmt(row['step'])}, episodes {_fmt(row['episodes'])}, "
              f"train_s {_fmt(row['train_s'])}, episode ratio "
              f"{'-' if ratio is None else f'{ratio:.2f}'}")  # fmt: skip
    if args.plot:
        print(f"plot: {plot_curves(curves, args.plot)}", file=sys.stderr)
    print(json.dumps({"target": target, "reached": reached, "curves": curves}))


if __name__ == "__main__":
    main()
