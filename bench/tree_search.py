"""Tree search at evaluation: held-out success and cost vs K (candidates per turn) and depth.

For each (K, depth) of the grid the same held-out episodes are played with
``agentrl.planning.search_episodes`` (K = 1 is plain greedy decoding); prints success, tokens
generated (kept turns + branches) and seconds per episode, and writes them to ``--json`` with
each episode's seed, level, success and termination (cells compare episode by episode).
The search runs batched across episodes (``agentrl.planning.search_batch``); ``--peer N``
also plays each cell's first N episodes one at a time (the unbatched path, the peer) and
batched, and prints the speedup and whether both kept the same tokens. Not a test: prints
figures.

    python bench/tree_search.py runs/smollm2_weather --levels 3 --episodes 24 \
        --k 1,2,4 --depth 1,3 --peer 4 --json /tmp/search.json
"""

from __future__ import annotations

import argparse
import json

from agentrl.envs import make
from agentrl.eval.api import load_eval_engine, run_settings, stderr_progress
from agentrl.eval.runner import eval_specs, summarize
from agentrl.planning import search_episodes


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def peer_timing(generator, make_env, specs, cell: dict) -> dict:
    """``specs`` searched one episode at a time and batched: seconds per episode, the speedup,
    and whether both kept the same tokens (they should, up to rounding)."""
    one, one_cost = search_episodes(generator, make_env, specs, batched=False, **cell)
    many, cost = search_episodes(generator, make_env, specs, batched=True, **cell)
    n = len(specs)
    same = sum(a.token_ids == b.token_ids for a, b in zip(one, many, strict=True))
    return {"episodes": n, "one_at_a_time_s_per_episode": round(one_cost.seconds / n, 2),
            "batched_s_per_episode": round(cost.seconds / n, 2),
            "speedup": round(one_cost.seconds / max(cost.seconds, 1e-9), 2),
            "identical_episodes": same}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("policy", help="A run directory (its task settings are used) or model path.")
    ap.add_argument("--task", default=None, help="Env id (default: the run's task).")
    ap.add_argument("--levels", default=None, help="Comma-separated levels (default: the run's).")
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--seed", type=int, default=10_000, help="First held-out seed.")
    ap.add_argument("--k", default="1,2,4", help="Candidates per turn, comma-separated.")
    ap.add_argument("--depth", default="1,3", help="Lookahead turns, comma-separated.")
    ap.add_argument("--weights", default="final", help="final or start (a run directory's).")
    ap.add_argument("--as-eval-over", default=None, metavar="LEVELS",
                    help="Pick the episodes an evaluation over these levels (comma-separated) "
                    "plays with --episodes, then keep those of --levels: the same seeds as "
                    "`agentrl eval --levels LEVELS`, so greedy and search compare episode by "
                    "episode.")  # fmt: skip
    ap.add_argument("--peer", type=int, default=0, metavar="N",
                    help="Also time each cell's first N episodes one at a time against "
                    "batched (0: no peer).")  # fmt: skip
    ap.add_argument("--json", default=None, help="Write the figures here.")
    args = ap.parse_args()

    own = run_settings(args.policy)
    task = args.task or own.get("task", "weather")
    levels = _ints(args.levels) if args.levels else own.get("levels", [1, 2, 3])
    kwargs = dict(own.get("env_kwargs", {})) if task == own.get("task") else {}
    max_turns = own.get("max_turns", 6)
    max_new, max_total = own.get("max_new_tokens", 96), own.get("max_total_tokens", 1024)
    generator = load_eval_engine(args.policy, "cpu", args.weights)
    make_env = lambda: make(task, max_turns=max_turns, **kwargs)  # noqa: E731
    if args.as_eval_over:
        specs = [sp for sp in eval_specs(args.episodes, _ints(args.as_eval_over), args.seed)
                 if sp.level in levels]  # fmt: skip
    else:
        specs = eval_specs(args.episodes, levels, args.seed)
    rows = []
    print(f"{task} levels {levels}, {len(specs)} held-out episodes, {args.policy}")
    print("| K | depth | success | tokens / episode (kept + branches) | s / episode |")
    print("|---|---|---|---|---|")
    for k in _ints(args.k):
        for depth in _ints(args.depth) if k > 1 else [1]:
            cell = {"k": k, "depth": depth, "max_new_tokens": max_new,
                    "max_total_tokens": max_total}  # fmt: skip
            trajs, cost = search_episodes(generator, make_env, specs, **cell,
                                          on_episode=stderr_progress(len(specs)))  # fmt: skip
            s = summarize(trajs)
            n = len(specs)
            row = {"k": k, "depth": depth, "success_rate": s["success_rate"],
                   "success_by_level": s["success_by_level"], **cost.as_dict(),
                   "s_per_episode": cost.seconds / n,
                   "episodes": [{"seed": sp.seed, "level": sp.level, "success": t.success,
                                 "termination": t.termination}
                                for sp, t in zip(specs, trajs, strict=True)]}  # fmt: skip
            rows.append(row)
            print(f"| {k} | {depth} | {s['success_rate']:.3f} | "
                  f"{cost.episode_tokens / n:.0f} + {cost.branch_tokens / n:.0f} | "
                  f"{cost.seconds / n:.1f} |", flush=True)  # fmt: skip
            if args.peer:
                row["peer"] = peer_timing(generator, make_env, specs[: args.peer], cell)
                print(f"  first {args.peer}: {row['peer']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"task": task, "levels": levels, "episodes": len(specs), "rows": rows},
                      f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
