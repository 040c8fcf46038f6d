"""BFCL accuracy per category for a policy (data and environments from the bfcl-eval wheel).

    python bench/bfcl_bench.py reference            # proves the scorer: ~100%
    python bench/bfcl_bench.py agentrl/tiny --limit 20 --multi-turn-limit 3
    python bench/bfcl_bench.py runs/smollm2_weather --weights start   # a run's "before"

POLICY (positional, as in ``agentrl eval POLICY``) is ``reference`` (the default) or a model /
run directory / hub id (greedy decoding). Prints one line per category and the JSON report as
the last stdout line. Needs ``pip install --no-deps bfcl-eval``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from agentrl.eval.bfcl_data import MULTI_TURN, SINGLE_TURN, bfcl_available


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("policy", nargs="?", default="reference", help="reference or a model.")
    ap.add_argument("--categories", default=",".join([*SINGLE_TURN, *MULTI_TURN]))
    ap.add_argument("--limit", type=int, default=None, help="Entries per single-turn category.")
    ap.add_argument("--multi-turn-limit", type=int, default=None, help="Multi-turn entries.")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument(
        "--weights",
        default="final",
        choices=["final", "start"],
        help="A run directory's weights: final, or start (when RL began).",
    )
    args = ap.parse_args()
    if not bfcl_available():
        sys.exit("bfcl-eval is not installed: pip install --no-deps bfcl-eval")
    from agentrl.eval.bfcl import HFBFCLPolicy, run_bfcl

    policy: object = "reference"
    if args.policy != "reference":
        from agentrl.eval.api import load_eval_engine

        gen = load_eval_engine(args.policy, args.device, args.weights)
        policy = HFBFCLPolicy(gen, max_new_tokens=args.max_new_tokens)
    report: dict = {"policy": args.policy, "weights": args.weights, "accuracy": {}, "entries": {}}
    t0 = time.time()
    for cat in args.categories.split(","):
        limit = args.multi_turn_limit if cat in MULTI_TURN else args.limit
        r = run_bfcl(policy, [cat], limit)
        report["accuracy"][cat] = r["accuracy"][cat]
        report["entries"][cat] = r["entries"][cat]
        line = f"{cat:18s} accuracy {r['accuracy'][cat]:.3f}"
        for key in ("call_rate", "name_accuracy"):
            if cat in r.get(key, {}):
                report.setdefault(key, {})[cat] = r[key][cat]
                line += f"  {key} {r[key][cat]:.3f}"
        print(f"{line}  ({r['entries'][cat]} entries)", file=sys.stderr)
    report["wall_s"] = round(time.time() - t0, 1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
