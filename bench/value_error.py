"""How well a PPO run's value head predicts the return, on held-out episodes.

Tree search with ``--value critic`` ranks branches by the critic's V(s); this says whether V
is worth ranking by. The run's policy plays held-out episodes greedily (the run's task
settings, fixed seeds); at the start of every assistant turn the critic predicts V from the
ids the policy saw, and the target is the episode's reward (what the search compares branches
by; with the rewards at the end and gamma near 1 it is also what V was trained towards).
Prints the episodes' success, then, overall and per turn index: mean absolute error, RMSE,
the Pearson correlation of V with the return, and the error of the constants that know the
mean and the median return (a critic worth using beats both, and correlates: only the
ranking matters to a search). Not a test: prints figures.

    python bench/value_error.py runs/ppo_weather --episodes 96 --json /tmp/value.json
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from statistics import median

from agentrl.envs import make
from agentrl.eval.api import load_eval_engine, run_settings
from agentrl.eval.runner import eval_specs, summarize
from agentrl.planning.value import critic_values, load_critic
from agentrl.rollout import run_episodes


def turn_starts(turn_of_token: list[int]) -> list[int]:
    """The position of the last id before each assistant turn's first generated token: V
    there is V of what the policy saw when the turn began."""
    starts, seen = [], set()
    for i, turn in enumerate(turn_of_token):
        if turn >= 0 and turn not in seen:
            seen.add(turn)
            starts.append(i - 1)
    return starts


def errors(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """MAE, RMSE, correlation of (predicted, actual) pairs, and the MAE of two constants: the
    mean return and the median return (the constant with the least absolute error)."""
    n = len(pairs)
    pred = [p for p, _ in pairs]
    act = [a for _, a in pairs]
    mean_a, mean_p = sum(act) / n, sum(pred) / n
    cov = sum((p - mean_p) * (a - mean_a) for p, a in pairs)
    sp = math.sqrt(sum((p - mean_p) ** 2 for p in pred))
    sa = math.sqrt(sum((a - mean_a) ** 2 for a in act))
    return {
        "n": n,
        "mae": sum(abs(p - a) for p, a in pairs) / n,
        "rmse": math.sqrt(sum((p - a) ** 2 for p, a in pairs) / n),
        "corr": cov / (sp * sa) if sp > 0 and sa > 0 else float("nan"),
        "mean_value": mean_p,
        "mean_return": mean_a,
        "constant_mae": sum(abs(mean_a - a) for a in act) / n,
        "median_constant_mae": sum(abs(median(act) - a) for a in act) / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="A PPO run directory (with critic.pt and config.yaml).")
    ap.add_argument("--episodes", type=int, default=96)
    ap.add_argument("--seed", type=int, default=10_000, help="First held-out seed.")
    ap.add_argument("--json", default=None, help="Also write the figures here.")
    args = ap.parse_args()

    opts = run_settings(args.run_dir)
    if not opts:
        raise SystemExit(f"{args.run_dir} is not a run directory (no config.yaml)")
    generator = load_eval_engine(args.run_dir, "cpu")
    critic = load_critic(args.run_dir, generator.model)
    kwargs = {**opts["env_kwargs"]}

    def make_env():
        return make(opts["task"], max_turns=opts["max_turns"], **kwargs)

    specs = eval_specs(args.episodes, opts["levels"], args.seed)
    trajs = run_episodes(generator, make_env, specs, greedy=True,
                         max_new_tokens=opts["max_new_tokens"],
                         max_total_tokens=opts["max_total_tokens"],
                         memory=opts.get("memory"))  # fmt: skip
    pairs: list[tuple[float, float]] = []
    by_turn: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for t in trajs:
        if t.is_harness_fault:
            continue
        along = critic_values(critic, generator.model, t.token_ids)  # one pass per episode
        for k, position in enumerate(turn_starts(t.turn_of_token)):
            value = along[position]
            pairs.append((value, t.reward.total))
            by_turn[k].append((value, t.reward.total))
    summary = summarize(trajs)
    out = {
        "run_dir": args.run_dir,
        "episodes": len(trajs),
        "success_rate": summary["success_rate"],
        "success_by_level": summary["success_by_level"],
        "overall": errors(pairs),
        "by_turn": {str(k): errors(v) for k, v in sorted(by_turn.items()) if len(v) > 1},
    }
    o = out["overall"]
    print(f"success {out['success_rate']:.3f} {out['success_by_level']}")
    print(f"{out['episodes']} episodes, {o['n']} turn starts: MAE {o['mae']:.3f} (constant: "
          f"mean {o['constant_mae']:.3f}, median {o['median_constant_mae']:.3f}), RMSE "
          f"{o['rmse']:.3f}, corr {o['corr']:.3f}, mean V {o['mean_value']:.3f} vs return "
          f"{o['mean_return']:.3f}")  # fmt: skip
    for k, e in out["by_turn"].items():
        print(f"  turn {k}: n {e['n']:3d}  MAE {e['mae']:.3f} (constant {e['constant_mae']:.3f})"
              f"  corr {e['corr']:.3f}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
