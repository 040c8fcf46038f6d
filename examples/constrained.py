"""Grammar-constrained tool calls: the same prompt sampled free and under the tool-call grammar.

    python examples/constrained.py                                # the tiny local model
    python examples/constrained.py --model agentrl/smollm2-135m   # the real one

Training uses it with ``--set rollout.constrained=tool_calls``; evaluation with
``agentrl eval RUN --constrained tool_calls``. Here the engine is driven by hand: one session,
four samples of the first turn of a weather episode, each free and then constrained with
``required=True`` (the turn must be calls, as the API's ``tool_choice="required"``).
"""

from __future__ import annotations

import argparse

import torch

from agentrl.chat.parser import parse_action
from agentrl.chat.render import encode_prompt, tokenize
from agentrl.envs import make
from agentrl.eval.api import load_eval_engine


def sample(engine, prompt: list[int], schemas: list[dict], constrained: bool) -> list[str]:
    """Four first turns, at temperature 1, from fixed seeds."""
    sess = engine.session(4, len(prompt) + 64, temperature=1.0)
    for i in range(4):
        extra = {}
        if constrained:
            extra["constraint"] = engine.tool_call_constraint(schemas, required=True)
        sess.add(i, prompt, 64, seed=i, **extra)
    done = {}
    while len(done) < 4:
        for key, s in sess.step():
            done[key] = engine.tokenizer.decode(s.ids, skip_special_tokens=True)
            sess.release(key)
    return [done[i] for i in range(4)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="agentrl/tiny")
    args = ap.parse_args()
    torch.manual_seed(0)
    engine = load_eval_engine(args.model, "cpu")
    env = make("weather")
    messages, _ = env.reset(seed=3, options={"level": 2})
    prompt = encode_prompt(engine.tokenizer, messages, env.tool_schemas)
    print("task:", messages[-1]["content"])
    for constrained in (False, True):
        print("\nconstrained" if constrained else "\nfree")
        for text in sample(engine, prompt, env.tool_schemas, constrained):
            action = parse_action(text)
            calls = [f"{c.name}({c.arguments})" for c in action.tool_calls]
            print(f"  {text[:90]!r}\n    -> calls {calls}, malformed {len(action.errors)}")
    grammar = engine.tool_call_grammar()
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"town": "Oslo"}}\n</tool_call>'
    ids = tokenize(engine.tokenizer, bad) + engine.stop_ids[:1]
    print("\nthe grammar accepts a call with an undeclared argument:", grammar.accepts(
        env.tool_schemas, ids))  # fmt: skip


if __name__ == "__main__":
    main()
