"""Score a tree-search branch with a PPO run's critic: V(s) at the branch's last token.

``critic_scorer(run_dir, policy)`` loads ``run_dir/critic.pt`` (written by a PPO run; its
kind, a value head on the policy's last hidden state or a separate trunk, is read from the
run's config) and returns ``score(sequences) -> values``, one forward per sequence
(``critic_values`` gives V at every position of one sequence from a single pass). Used by
``search_episodes(..., scorer=...)`` and ``agentrl eval --search K --value critic``: a branch
still running after its lookahead is worth its predicted return instead of the reward layers
it earned so far.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agentrl.algos.value import make_critic, policy_forward

CRITIC_FILE = "critic.pt"


def load_critic(run_dir: str | Path, policy: Any) -> torch.nn.Module:
    """``run_dir``'s PPO critic (its kind read from the run's config), in eval mode."""
    from agentrl.config import load_config

    run_dir = Path(run_dir)
    path = run_dir / CRITIC_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"--value critic needs a PPO run directory with {CRITIC_FILE}; {path} not found "
            "(GRPO runs have no critic: use the default, --value layers)"
        )
    cfg = load_config(run_dir / "config.yaml")
    critic = make_critic(policy, cfg.algo.ppo.critic)
    critic.load_state_dict(torch.load(path, map_location=next(policy.parameters()).device))
    return critic.eval()


@torch.no_grad()
def critic_values(critic: torch.nn.Module, policy: Any, ids: list[int]) -> list[float]:
    """V at every position of one id sequence, from one forward pass.

    Both the policy and a separate trunk are causal, so V at position i is V of the prefix
    ``ids[: i + 1]``: one pass scores every turn start of an episode.
    """
    x = torch.tensor([ids], device=next(policy.parameters()).device)  # [1, T]
    attention = torch.ones_like(x)
    hidden = None
    if not critic.separate:
        _, hidden = policy_forward(policy, x, attention, with_hidden=True)
    return critic(x, attention, hidden)[0].tolist()  # [T]


def critic_scorer(run_dir: str | Path, policy: Any) -> Callable[[list[list[int]]], list[float]]:
    """V at the last token of each id sequence, from ``run_dir``'s PPO critic."""
    critic = load_critic(run_dir, policy)

    def score(sequences: list[list[int]]) -> list[float]:
        return [critic_values(critic, policy, ids)[-1] for ids in sequences]

    return score
