"""The training rollout with tree search (``rollout.search_k``): one episode at a time vs batched.

Plays one training step's episodes (``--groups`` task instances x ``--group-size`` samples,
as ``agentrl train`` draws them) with ``agentrl.planning.search_rollout``, every candidate
sampled at the run's temperature, first one episode at a time (the peer), then batched
across episodes on one decode session, with the same seeds. Prints seconds, tokens, the
speedup and how many episodes and siblings both kept token for token. Not a test: prints
figures.

    python bench/search_rollout.py runs/smollm2_weather --k 4 --depth 1 --groups 2 \
        --group-size 4 --json /tmp/search_rollout.json
"""

from __future__ import annotations

import argparse
import json

from agentrl.envs import make
from agentrl.eval.api import load_eval_engine, run_settings
from agentrl.planning.search_train import episodes_only, search_rollout
from agentrl.rollout import EpisodeSpec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("policy", help="A run directory (its task settings are used).")
    ap.add_argument("--k", type=int, default=4, help="Candidates per turn (>= 2).")
    ap.add_argument("--depth", type=int, default=1, help="Turns each branch plays.")
    ap.add_argument("--groups", type=int, default=2, help="Task instances.")
    ap.add_argument("--group-size", type=int, default=4, help="Samples of each instance.")
    ap.add_argument("--levels", default=None, help="Comma-separated levels (default: the run's).")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0, help="Base of the candidates' seeds.")
    ap.add_argument("--json", default=None, help="Write the figures here.")
    args = ap.parse_args()

    own = run_settings(args.policy)
    levels = [int(x) for x in args.levels.split(",")] if args.levels else own["levels"]
    specs = [EpisodeSpec(seed=1_000 + g, level=levels[g % len(levels)], group_id=g)
             for g in range(args.groups) for _ in range(args.group_size)]  # fmt: skip
    engine = load_eval_engine(args.policy, "cpu", "final")
    make_env = lambda: make(own["task"], max_turns=own["max_turns"], **own["env_kwargs"])  # noqa: E731
    cell = {"k": args.k, "depth": args.depth, "temperature": args.temperature,
            "max_new_tokens": own["max_new_tokens"], "max_total_tokens": own["max_total_tokens"],
            "seed": args.seed}  # fmt: skip
    out = {"task": own["task"], "levels": levels, "episodes": len(specs), **cell}
    results = {}
    for name, batched in (("one_at_a_time", False), ("batched", True)):
        trajs, cost = search_rollout(engine, make_env, specs, batched=batched, **cell)
        results[name] = trajs
        eps = episodes_only(trajs)
        out[name] = {**cost.as_dict(), "trajectories": len(trajs),
                     "sampled_success": sum(t.success for t in eps) / len(eps)}  # fmt: skip
        print(f"{name}: {cost.seconds:.1f} s, {cost.episode_tokens} episode + "
              f"{cost.branch_tokens} branch tokens, {len(trajs)} trajectories", flush=True)
    one, many = results["one_at_a_time"], results["batched"]
    out["identical"] = sum(a.token_ids == b.token_ids for a, b in zip(one, many, strict=True))
    out["speedup"] = round(out["one_at_a_time"]["seconds"] / out["batched"]["seconds"], 2)
    print(f"speedup {out['speedup']}x; identical {out['identical']} of {len(one)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
