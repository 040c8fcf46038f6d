"""Two agents, one task: meeting_duo with decentralized execution and per-agent trajectories.

A calendar agent and a contacts agent (the same policy, a role prompt each) must book a
meeting that needs facts from both sides; they talk only through ``send_message``. This
example plays the reference team (the warm start's demonstrations), shows what each agent's
context holds, then plays episodes with the tiny model and prints each agent's trajectory:
its own token ids, loss mask, reward, and the team id that links the two.

    python examples/multi_agent.py            # ~1-2 minutes on 2 CPU cores

Training: ``agentrl train configs/duo_grpo.yaml`` (warm start on both agents' sides of the
reference episodes, GRPO with one baseline group per task instance and role).
"""

from __future__ import annotations

import torch

import agentrl.multiagent.envs  # noqa: F401 - registers meeting_duo
from agentrl.chat.render import stop_token_ids
from agentrl.engine.decoder import Engine
from agentrl.envs import make
from agentrl.multiagent.team import describe
from agentrl.policy.loading import load_policy
from agentrl.rollout import EpisodeSpec, run_episodes


def show_reference() -> None:
    env = make("meeting_duo")
    print("roles and their tools:", describe(env))
    info = env.play_reference(seed=3, level=2)
    print(f"reference team: {info['termination']}, team reward {info['reward'].total:.2f}, "
          f"per agent {[round(b.total, 2) for b in info['agent_rewards']]}")  # fmt: skip
    for k, role in enumerate(env.roles):
        print(f"\n--- what the {role} agent saw and did ---")
        for m in env.messages[k][1:]:
            calls = [c["function"]["name"] for c in m.get("tool_calls", [])]
            print(f"{m['role']:>9}: {m['content'][:90] or calls}")


def play_with_the_tiny_model() -> None:
    torch.manual_seed(0)
    model, tok = load_policy("agentrl/tiny")
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    specs = [EpisodeSpec(seed=s, level=1, group_id=s) for s in range(2)]
    trajs = run_episodes(engine, lambda: make("meeting_duo", max_turns=2), specs,
                         max_new_tokens=48, max_total_tokens=1200, greedy=True)  # fmt: skip
    print("\n--- the untrained tiny model: one trajectory per agent ---")
    for t in trajs:
        print(f"team {t.info['team']} agent {t.info['agent']:<8} {t.termination:<9} "
              f"tokens {len(t.token_ids)} (own sampled {sum(t.loss_mask)}) "
              f"reward {t.reward.total:.2f} team reward {t.info['team_reward']:.2f}")  # fmt: skip


if __name__ == "__main__":
    show_reference()
    play_with_the_tiny_model()
