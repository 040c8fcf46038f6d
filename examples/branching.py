"""Branch an episode: snapshot an env, try two actions from the same state, keep the better;
then the same at scale with tree search over a model's turns.

Run: ``python examples/branching.py`` (the env part, no model), or
``python examples/branching.py RUN_OR_MODEL_DIR`` to also play 6 weather episodes with
tree search (K=4, depth 2) against plain greedy decoding.
"""

import sys

from agentrl.envs import make
from agentrl.eval.api import load_eval_engine
from agentrl.eval.runner import eval_specs, summarize
from agentrl.planning import search_episodes

CALL = '<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}\n</tool_call>'


def branch_by_hand() -> None:
    env = make("weather", fault_rate=0.0, last_actions=3)
    env.reset(seed=7, options={"level": 2})
    first, second = env.instance.data["cities"]
    env.step(CALL.format(city=first))
    snap = env.snapshot()  # the recipe of this state: instance, seed, the turn so far
    tries = {}
    for action in (CALL.format(city=second), "It is warmer in " + first + "."):
        branch = make("weather", fault_rate=0.0, last_actions=3)
        branch.restore(snap)  # replays the turn, checks the dialogue is identical
        obs, reward, terminated, truncated, _ = branch.step(action)
        tries[action] = (terminated or truncated, obs[-1]["content"] if obs else "")
    for action, (ended, seen) in tries.items():
        print(f"{action!r}\n  ended: {ended}\n  observation: {seen}\n")


def search_with_a_model(policy: str) -> None:
    generator = load_eval_engine(policy, "cpu")
    specs = eval_specs(6, [1, 2, 3], 10_000)
    make_env = lambda: make("weather")  # noqa: E731
    for k in (1, 4):
        trajs, cost = search_episodes(generator, make_env, specs, k=k, depth=2,
                                      max_new_tokens=96, max_total_tokens=1536)  # fmt: skip
        print(f"K={k}: success {summarize(trajs)['success_rate']:.2f}, {cost.as_dict()}")


if __name__ == "__main__":
    branch_by_hand()
    if len(sys.argv) > 1:
        search_with_a_model(sys.argv[1])
