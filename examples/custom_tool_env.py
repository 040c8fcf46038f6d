"""A custom tool environment in ~40 lines: a unit converter task, checked and demonstrated.

Run: ``python examples/custom_tool_env.py`` (add ``--train`` to train the tiny model on it).
From the CLI: ``agentrl train CONFIG --set task.env=convert``
``--set task.imports=[examples/custom_tool_env.py]``.
"""

import random
import sys

import agentrl.envs as envs
from agentrl.tools.registry import tool
from agentrl.types import ToolCall

FACTORS = {("km", "mi"): 0.621371, ("kg", "lb"): 2.20462, ("m", "ft"): 3.28084}


@tool
def convert(value: float, from_unit: str, to_unit: str) -> dict:
    """Convert a quantity between units (km/mi, kg/lb, m/ft).

    Args:
        value: The quantity.
        from_unit: Its unit, e.g. "km".
        to_unit: The wanted unit, e.g. "mi".
    """
    if (from_unit, to_unit) not in FACTORS:
        raise ValueError(f"cannot convert {from_unit} to {to_unit}")
    return {"value": round(value * FACTORS[from_unit, to_unit], 2), "unit": to_unit}


class ConvertFamily(envs.TaskFamily):
    name, levels = "convert", (1,)
    system_prompt = "Use the tools, then answer with the number and unit."

    def tools(self, instance):
        return [convert]

    def sample(self, rng: random.Random, level: int) -> envs.TaskInstance:
        (src, dst), value = rng.choice(list(FACTORS)), rng.randint(1, 500)
        call = ToolCall("convert", {"value": value, "from_unit": src, "to_unit": dst})
        answer = round(value * FACTORS[src, dst], 2)
        return envs.TaskInstance(
            f"convert-{value}{src}-{dst}",
            level,
            f"How many {dst} is {value} {src}?",
            {"answer": answer},
            [call],
        )

    def check_answer(self, instance, answer: str) -> bool:
        return f"{instance.data['answer']:g}" in answer

    def reference_answer(self, instance, results) -> str:
        return f"{results[0]['value']:g} {results[0]['unit']}."


envs.register("convert", ConvertFamily, max_turns=4)

if __name__ == "__main__":
    env = envs.make("convert")
    print("check_env:", envs.check_env(env))
    messages, info = envs.run_reference_episode(env, seed=0, level=1)
    for m in messages:
        print(f"[{m['role']}] {m['content'] or m.get('tool_calls')}")
    print("termination:", info["termination"], "reward:", info["reward"].to_dict()["layers"])
    if "--train" in sys.argv:  # the same trainer as the demo, on this task
        from agentrl.config import build_config
        from agentrl.train import train

        cfg = build_config(
            {},
            [
                "task.env=convert",
                "task.levels=[1]",
                "train.eval_levels=[1]",
                "train.warmstart_levels=[1]",
                "train.steps=5",
                "train.eval_episodes=32",
                "train.run_dir=runs/convert",
            ],
        )
        print(train(cfg))
