"""Cost of one turn as episodes grow: agentrl's engine (KV cache kept across turns) against
re-encoding the history every turn (``HFGenerator``: transformers ``generate``, the rollout
before the engine), in one run.

Run from the repository root::

    python bench/turn_cost.py                                # tiny model, ~2 min on 2 cores
    python bench/turn_cost.py --model agentrl/smollm2-135m --rows 8 --json turns.json

Every turn of every row appends the same delta (a tool call's response, ``--delta`` tokens)
and then decodes exactly ``--new`` tokens (no stop token ends a turn early), so each turn
does the same work; only the history behind it grows. Prints seconds per turn at turns 2, 5,
10 and 20 and turn 10's cost over turn 2's (the goal: at most 1.3 for the engine). Not a test.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from agentrl.chat.render import encode_prompt, tokenize
from agentrl.engine.decoder import Engine
from agentrl.envs import make
from agentrl.policy.generate import HFGenerator
from agentrl.policy.loading import load_policy

DELTA = ('</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{"city": "Oslo", '
         '"temperature_c": -3, "condition": "snowy"}\n</tool_response><|im_end|>\n'
         '<|im_start|>assistant\n')  # fmt: skip
REPORT = (2, 5, 10, 20)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="agentrl/tiny")
    p.add_argument("--rows", type=int, default=16, help="episodes decoding together")
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--new", type=int, default=12, help="tokens decoded per turn")
    p.add_argument("--side", choices=("both", "engine", "generate"), default="both")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def prompts(tok, rows: int) -> list[list[int]]:
    out = []
    for s in range(rows):
        env = make("weather")
        msgs, _ = env.reset(seed=s, options={"level": 1 + s % 3})
        out.append(encode_prompt(tok, msgs, env.tool_schemas))
    return out


def engine_turns(model, tok, starts, delta, args) -> list[float]:
    """Seconds of each turn with one engine session (cache kept across turns)."""
    engine = Engine(model, tok, [-1], tok.pad_token_id)  # no stop token: every turn is --new
    capacity = max(map(len, starts)) + args.turns * (args.new + len(delta)) + 1
    sess = engine.session(len(starts), capacity, temperature=1.0)
    sess.set_prefix(starts[0][: engine.shared_prefix(starts)])
    for i, p in enumerate(starts):
        sess.add(i, p, args.new, seed=i)
    times = []
    for turn in range(args.turns):
        t0 = time.perf_counter()
        ended = 0
        while ended < len(starts):
            ended += len(sess.step())
        times.append(time.perf_counter() - t0)
        if turn + 1 < args.turns:
            for i in range(len(starts)):
                sess.extend(i, delta, args.new)
    return times


def generate_turns(model, tok, starts, delta, args) -> list[float]:
    """Seconds of each turn when every turn re-encodes the whole history."""
    gen = HFGenerator(model, tok, [len(tok) + 10], tok.pad_token_id)  # an id never sampled
    seqs = [list(p) for p in starts]
    times = []
    for _ in range(args.turns):
        t0 = time.perf_counter()
        out = gen.generate(seqs, max_new_tokens=args.new, temperature=1.0)
        times.append(time.perf_counter() - t0)
        seqs = [s + o.ids + delta for s, o in zip(seqs, out, strict=True)]
    return times


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, tok = load_policy(args.model)
    starts, delta = prompts(tok, args.rows), tokenize(tok, DELTA)
    sides = {"engine": engine_turns, "generate": generate_turns}
    result: dict = {"model": args.model, "rows": args.rows, "new_per_turn": args.new,
                    "delta_tokens": len(delta), "prompt_tokens": len(starts[0])}  # fmt: skip
    for name, fn in sides.items():
        if args.side not in ("both", name):
            continue
        times = fn(model, tok, starts, delta, args)
        shown = {t: times[t - 1] for t in REPORT if t <= len(times)}
        result[name] = {"s_per_turn": shown,
                        "turn10_over_turn2": shown.get(10, float("nan")) / shown[2]}  # fmt: skip
        cells = "  ".join(f"turn {t}: {s:.3f}s" for t, s in shown.items())
        print(f"{name:>9}: {cells}  turn10/turn2 {result[name]['turn10_over_turn2']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
