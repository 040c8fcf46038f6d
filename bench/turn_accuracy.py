"""Which turn of a task a policy gets wrong: greedy accuracy per assistant turn, teacher-forced.

For each seed, the reference solver plays one episode (no tool faults). Before each of its
assistant turns the policy sees the reference conversation so far and generates greedily; the
turn counts as right when the text equals the reference action exactly. So a low figure at
turn 2 of level 2 means the policy cannot make the second lookup even when the first one was
done for it, whatever it would have done on its own at turn 1. "Opens right" counts the turns
whose first line is of the reference's kind (a note, a call or an answer): a warm start whose
greedy turns never open with the notes it was shown fails here in minutes, where its held-out
evaluation takes an hour. Not a test: prints figures.

    python bench/turn_accuracy.py runs/demo/model --level 2 --episodes 30 [--task weather]
    python bench/turn_accuracy.py runs/meeting_probe_ws --weights start --level 1 --episodes 8
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import torch

import agentrl.envs as envs
from agentrl.chat.render import assistant_body, encode_prompt, stop_token_ids
from agentrl.envs.reference import run_reference_episode
from agentrl.eval.api import parse_env_options, run_settings
from agentrl.eval.weights import load_eval_engine


@torch.no_grad()
def greedy_turn(model, tokenizer, messages: list, tools: list, max_new_tokens: int) -> str:
    ids = encode_prompt(tokenizer, messages, tools)
    stops = stop_token_ids(tokenizer)
    out = model.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False,
                         eos_token_id=stops, pad_token_id=stops[0])  # fmt: skip
    return tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True).strip()


def around_difference(want: str, got: str, width: int = 40) -> tuple[str, str]:
    """Both texts from a little before the first character where they differ: a wrong turn
    whose tail matches (a note worded differently, an argument early on) shows where it went
    wrong."""
    pairs = enumerate(zip(want, got, strict=False))
    at = next((i for i, (a, b) in pairs if a != b), min(len(want), len(got)))
    start = max(0, at - width // 2)
    return want[start : start + width * 2], got[start : start + width * 2]


def opening(text: str) -> str:
    """What a turn opens with: a call, a note before calls, or an answer (no call)."""
    if text.startswith("<tool_call>"):
        return "call"
    return "note" if "<tool_call>" in text else "answer"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="A saved model directory or a run directory.")
    ap.add_argument("--weights", default="final", help="A run's final or start weights.")
    ap.add_argument("--task", default=None, help="Registered env id (default: the run's, else "
                    "weather).")  # fmt: skip
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for the env (YAML "
                    "value; the run's task.env_kwargs are the defaults).")  # fmt: skip
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--episodes", type=int, default=30)
    ap.add_argument("--seed", type=int, default=20_000, help="First seed (held-out range).")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="Tokens per turn "
                    "(default: the run's rollout.max_new_tokens, else 96).")  # fmt: skip
    ap.add_argument("--show", type=int, default=2, help="Wrong turns printed per turn index.")
    args = ap.parse_args()

    engine = load_eval_engine(args.model, "cpu", args.weights)
    model, tokenizer = engine.model, engine.tokenizer
    own = run_settings(args.model)
    task = args.task or own.get("task", "weather")
    kwargs = dict(own.get("env_kwargs", {})) if task == own.get("task") else {}
    try:
        kwargs.update(parse_env_options(args.env))
    except ValueError as err:
        ap.error(str(err))
    if task == "weather":
        kwargs.setdefault("fault_rate", 0.0)
    env = envs.make(task, max_turns=64, **kwargs)  # room for the whole reference episode
    max_new = args.max_new_tokens or own.get("max_new_tokens", 96)
    right, opens, total, shown = Counter(), Counter(), Counter(), Counter()
    for seed in range(args.seed, args.seed + args.episodes):
        messages, _ = run_reference_episode(env, seed=seed, level=args.level)
        turn = 0
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            turn += 1
            want = assistant_body(tokenizer, message, env.tool_schemas).strip()
            got = greedy_turn(model, tokenizer, messages[:i], env.tool_schemas, max_new)
            total[turn] += 1
            right[turn] += got == want
            opens[turn] += opening(got) == opening(want)
            if got != want and shown[turn] < args.show:
                shown[turn] += 1
                w, g = around_difference(want, got)
                print(f"turn {turn} wanted {w!r}\n       got    {g!r}")
    for turn in sorted(total):
        print(f"turn {turn}: {right[turn]}/{total[turn]} right, {opens[turn]} open right")
    print(json.dumps({"level": args.level, "right": dict(right), "opens_right": dict(opens),
                      "total": dict(total)}))  # fmt: skip


if __name__ == "__main__":
    main()
