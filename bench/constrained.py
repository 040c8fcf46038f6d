"""Grammar-constrained tool calls: success and format errors with and without the grammar.

The same model plays the same held-out episodes greedily twice, once free and once with
``constrained=tool_calls`` (``agentrl.engine.grammar``: once a turn writes ``<tool_call>`` only
a well-formed call of an offered tool can follow). Prints, for each: success overall and per
level, malformed calls per assistant turn (``format_error_rate``), mean calls and seconds;
then the cost of the grammar alone: milliseconds to compute one token mask. Not a test.

    python bench/constrained.py runs/smollm2_weather --weights start --episodes 96
    python bench/constrained.py agentrl/tiny --episodes 96 --json /tmp/constrained.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from agentrl.engine.grammar import allowed_tokens
from agentrl.envs import make
from agentrl.eval.api import evaluate_model, load_eval_engine, run_settings


def mask_ms(model_or_run: str, task: str, tokens: int = 200) -> float:
    """Milliseconds per token mask: the reference solver's first turn of ``task`` (text, then
    a call) replayed through a matcher, each mask computed and unpacked."""
    from llguidance.torch import fill_next_token_bitmask

    from agentrl.chat.render import tokenize

    engine = load_eval_engine(model_or_run, "cpu")
    env = make(task)
    env.reset(seed=1)
    grammar = engine.tool_call_grammar()
    ids = tokenize(engine.tokenizer, "Let me look that up. " + env.reference_action())
    words = torch.zeros(1, (grammar.vocab + 31) // 32, dtype=torch.int32)
    done, t0 = 0, time.perf_counter()
    while done < tokens:
        matcher = grammar.matcher(env.tool_schemas)
        for t in ids:
            fill_next_token_bitmask(matcher, words, 0)
            allowed_tokens(words, grammar.vocab)
            matcher.consume_token(t)
            done += 1
    return 1000 * (time.perf_counter() - t0) / done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="A run directory, a saved model or a model id.")
    ap.add_argument("--task", default=None, help="Default: the run's task, else weather.")
    ap.add_argument("--episodes", type=int, default=96)
    ap.add_argument("--weights", default="final", help="A run's final or start weights.")
    ap.add_argument("--seed", type=int, default=10_000, help="First held-out seed.")
    ap.add_argument("--json", default=None, help="Also write the figures here.")
    args = ap.parse_args()

    opts = run_settings(args.model)
    opts.pop("constrained", None)
    if args.task is not None and args.task != opts.get("task"):
        opts = {"task": args.task}
    out: dict = {"model": args.model, "weights": args.weights, "episodes": args.episodes}
    for mode in ("off", "tool_calls"):
        t0 = time.time()
        report, _ = evaluate_model(args.model, episodes=args.episodes, seed0=args.seed,
                                   weights=args.weights, constrained=mode, **opts)  # fmt: skip
        seconds = time.time() - t0
        keep = ("success_rate", "success_by_level", "format_error_rate", "mean_tool_calls",
                "terminations")  # fmt: skip
        out[mode] = {**{k: report[k] for k in keep}, "seconds": seconds}
        print(f"{mode:10s} success {report['success_rate']:.3f} {report['success_by_level']}  "
              f"format errors/turn {report['format_error_rate']:.3f}  calls/episode "
              f"{report['mean_tool_calls']:.2f}  {seconds:.0f} s")  # fmt: skip
    out["mask_ms"] = mask_ms(args.model, opts.get("task", "weather"))
    print(f"grammar: {out['mask_ms']:.3f} ms per token mask (one row)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
