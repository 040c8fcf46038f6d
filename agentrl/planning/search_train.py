"""Tree search as a rollout mode for training: per-turn credit from sibling branches.

``search_rollout`` plays each episode as ``search_episodes`` does, with every one of the K
candidates sampled from the policy (no greedy one): at each turn the K candidates share the
episode's history, each is played in a branch restored from the env's snapshot and followed
greedily ``depth - 1`` turns, and valued (its episode reward if it ended, else the reward
layers earned so far, or a critic's prediction). The episode keeps the best and moves on.

It returns two kinds of trajectories, both token-exact:

- the **episodes** (group ids of their specs), trained with the usual episode-level GRPO
  advantage against the other samples of their task;
- one **sibling** per candidate per turn: the episode's history up to that turn (not trained:
  mask 0) followed by the candidate's tokens (mask 1, their sampling log-probs), rewarded
  with its branch value, in a group of its own with its K - 1 siblings. GRPO on such a group
  is the per-turn advantage of the issue: a branch's return minus the mean of its siblings
  (divided by their std when ``algo.grpo.scale_rewards``). ``info["sibling_of"]`` names the
  episode, ``info["search_turn"]`` the turn.

Siblings are not episodes: metrics, the curriculum and evaluation read episodes only
(``episodes_only``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from agentrl.planning.lines import (
    Line,
    SearchCost,
    best_of,
    line_trajectory,
    play_turn,
    start_line,
)
from agentrl.planning.search import expand_turn
from agentrl.rollout import EpisodeSpec
from agentrl.types import RewardBreakdown, Trajectory

#: Sibling groups get ids from here down (episode groups count up from 0).
SIBLING_GROUP_BASE = -1


def is_sibling(traj: Trajectory) -> bool:
    """Whether ``traj`` is a search sibling (one candidate turn), not an episode."""
    return "sibling_of" in traj.info


def episodes_only(trajs: list[Trajectory]) -> list[Trajectory]:
    """The episodes among ``trajs`` (search siblings dropped)."""
    return [t for t in trajs if not is_sibling(t)]


def sibling_trajectory(line: Line, sample: Any, branch: Line, group_id: int,
                       episode: int, spec: EpisodeSpec) -> Trajectory:  # fmt: skip
    """One candidate of a turn: ``line``'s history (mask 0) then the candidate's own tokens
    (mask 1), rewarded with its branch's value."""
    history = list(line.ids)
    ids = branch.ids[len(history) : len(history) + len(sample.ids)]
    n = len(ids)
    return Trajectory(
        task_id=f"sibling-{episode}-{line.turn}", group_id=group_id,
        messages=[], token_ids=history + ids, loss_mask=[0] * len(history) + [1] * n,
        logprobs=[0.0] * len(history) + list(sample.logprobs[:n]),
        turn_of_token=[-1] * len(history) + [line.turn] * n,
        reward=RewardBreakdown(layers={"branch": branch.value}, weights={"branch": 1.0}),
        termination=branch.ended or "max_turns", level=spec.level,
        info={"sibling_of": episode, "search_turn": line.turn, "seed": spec.seed},
    )  # fmt: skip


def search_rollout(
    generator: Any,
    make_env: Callable[[], Any],
    specs: list[EpisodeSpec],
    *,
    k: int,
    depth: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 96,
    max_total_tokens: int = 1024,
    scorer: Callable[[list[list[int]]], list[float]] | None = None,
) -> tuple[list[Trajectory], SearchCost]:
    """Training episodes with tree search (module docstring): the episodes in spec order,
    then their siblings."""
    if k < 2 or depth < 1:
        raise ValueError(f"a search rollout needs k >= 2 and depth >= 1, got k={k}, depth={depth}")
    cost, start = SearchCost(), time.perf_counter()
    ids = itertools.count(SIBLING_GROUP_BASE, -1)
    episodes, siblings = [], []
    tok = generator.tokenizer
    for n, spec in enumerate(specs):
        line, task_id = start_line(tok, make_env, spec, max_total_tokens)
        while line.ended is None:
            candidates, branches = expand_turn(
                generator, make_env, line, k, depth, temperature, max_new_tokens,
                max_total_tokens, cost, scorer, greedy_first=False, top_p=top_p,
            )  # fmt: skip
            group = next(ids)
            siblings += [sibling_trajectory(line, c, b, group, n, spec)
                         for c, b in zip(candidates, branches, strict=True)]  # fmt: skip
            best = best_of(candidates, branches)
            cost.episode_tokens += len(best.ids)
            play_turn(line, best, tok, max_total_tokens)
        episodes.append(line_trajectory(line, spec, task_id))
    cost.seconds = time.perf_counter() - start
    return episodes + siblings, cost
