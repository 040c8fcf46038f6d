"""Which turn of a task a policy gets wrong: greedy accuracy per assistant turn, teacher-forced.

For each seed, the reference solver plays one episode (no tool faults). Before each of its
assistant turns the policy sees the reference conversation so far and generates greedily; the
turn counts as right when the text equals the reference action exactly. So a low figure at
turn 2 of level 2 means the policy cannot make the second lookup even when the first one was
done for it, whatever it would have done on its own at turn 1. Not a test: prints figures.

    python bench/turn_accuracy.py runs/demo/model --level 2 --episodes 30 [--task weather]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import torch
from transformers import AutoModelForCausalLM

import agentrl.envs as envs
from agentrl.chat.render import assistant_body, encode_prompt, stop_token_ids
from agentrl.envs.reference import run_reference_episode
from agentrl.policy.loading import load_tokenizer


@torch.no_grad()
def greedy_turn(model, tokenizer, messages: list, tools: list, max_new_tokens: int) -> str:
    ids = encode_prompt(tokenizer, messages, tools)
    stops = stop_token_ids(tokenizer)
    out = model.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False,
                         eos_token_id=stops, pad_token_id=stops[0])  # fmt: skip
    return tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True).strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="A saved model directory (a run's model/).")
    ap.add_argument("--task", default="weather", help="Registered env id (default weather).")
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--episodes", type=int, default=30)
    ap.add_argument("--seed", type=int, default=20_000, help="First seed (held-out range).")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--show", type=int, default=2, help="Wrong turns printed per turn index.")
    args = ap.parse_args()

    tokenizer = load_tokenizer(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    kwargs = {"fault_rate": 0.0} if args.task == "weather" else {}
    env = envs.make(args.task, **kwargs)
    right, total, shown = Counter(), Counter(), Counter()
    for seed in range(args.seed, args.seed + args.episodes):
        messages, _ = run_reference_episode(env, seed=seed, level=args.level)
        turn = 0
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            turn += 1
            want = assistant_body(tokenizer, message, env.tool_schemas).strip()
            got = greedy_turn(model, tokenizer, messages[:i], env.tool_schemas,
                              args.max_new_tokens)  # fmt: skip
            total[turn] += 1
            right[turn] += got == want
            if got != want and shown[turn] < args.show:
                shown[turn] += 1
                print(f"turn {turn} wanted {want[-70:]!r}\n       got    {got[-70:]!r}")
    for turn in sorted(total):
        print(f"turn {turn}: {right[turn]}/{total[turn]} right")
    print(json.dumps({"level": args.level, "right": dict(right), "total": dict(total)}))


if __name__ == "__main__":
    main()
