"""Hierarchical memory on a long episode: the prompt each turn sees, and the segments.

Run: ``python examples/memory.py`` (a scripted policy, no model; the tiny model's tokenizer
counts the tokens), or ``python examples/memory.py MODEL`` for another model's tokenizer.

A scripted policy looks up the weather of 24 cities, then answers. With ``rollout.memory``
on, the last 3 turns stay verbatim, the 7 before are one line each (the tool's key values)
and older turns are recalled from a MinHash LSH store when they match the current state.
Each rewritten prompt starts a new token-exact segment; printed: the prompt length per turn
with memory and with the full history, the last memory note, and the segments.
"""

import sys

from agentrl.chat.render import stop_token_ids, tokenize
from agentrl.config.memory import MemoryConfig
from agentrl.envs import make
from agentrl.envs.tasks.weather import CITIES
from agentrl.policy.generate import Sample
from agentrl.policy.loading import load_tokenizer, resolve_model_dir
from agentrl.rollout import EpisodeSpec, run_episodes

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>'
CALLS = 24


class Scripted:
    """Calls get_weather for CITIES[0..CALLS-1] (Paris again at turn 22), then answers."""

    def __init__(self, tokenizer):
        self.tokenizer, self.stop = tokenizer, stop_token_ids(tokenizer)[0]
        self.prompt_lengths: list[int] = []

    def generate(self, prompts, **kwargs):
        turn = len(self.prompt_lengths)
        self.prompt_lengths.append(len(prompts[0]))
        city = "Paris" if turn == 22 else CITIES[turn % len(CITIES)]
        text = CALL % city if turn < CALLS else "Done: I looked them all up."
        ids = tokenize(self.tokenizer, text) + [self.stop]
        return [Sample(ids, [0.0] * len(ids), True) for _ in prompts]


def play(tokenizer, memory):
    policy = Scripted(tokenizer)
    env = lambda: make("weather", fault_rate=0.0, max_turns=CALLS + 1)  # noqa: E731
    traj = run_episodes(policy, env, [EpisodeSpec(seed=0, level=1)], max_total_tokens=8192,
                        memory=memory)[0]  # fmt: skip
    return policy.prompt_lengths, traj


def main(model: str = "agentrl/tiny") -> None:
    tokenizer = load_tokenizer(resolve_model_dir(model))
    memory = MemoryConfig(enabled=True, hot_turns=3, warm_turns=7, budget_tokens=160)
    with_memory, traj = play(tokenizer, memory)
    full, _ = play(tokenizer, None)
    print("turn  prompt tokens: memory / full history")
    for t in (1, 5, 10, 20, len(full)):
        print(f"{t:4d}  {with_memory[t - 1]:6d} / {full[t - 1]:6d}")
    last = traj.segments[-1]
    print("\nthe last memory note:\n" + last.messages[2]["content"])
    print(f"\n{len(traj.segments)} segments; policy tokens per segment:",
          [sum(s.loss_mask) for s in traj.segments])  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:])
