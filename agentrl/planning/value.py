"""Score a tree-search branch with a PPO run's critic: V(s) at the branch's last token.

``critic_scorer(run_dir, policy)`` loads ``run_dir/critic.pt`` (written by a PPO run; its
kind, a value head on the policy's last hidden state or a separate trunk, is read from the
run's config) and returns ``score(sequences) -> values``, one forward per sequence. Used by
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


def critic_scorer(run_dir: str | Path, policy: Any) -> Callable[[list[list[int]]], list[float]]:
    """V at the last token of each id sequence, from ``run_dir``'s PPO critic."""
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
    critic.eval()

    @torch.no_grad()
    def score(sequences: list[list[int]]) -> list[float]:
        values = []
        for ids in sequences:
            x = torch.tensor([ids], device=next(policy.parameters()).device)
            attention = torch.ones_like(x)
            hidden = None
            if not critic.separate:
                _, hidden = policy_forward(policy, x, attention, with_hidden=True)
            values.append(float(critic(x, attention, hidden)[0, -1]))
        return values

    return score
