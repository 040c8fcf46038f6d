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

On an engine the episodes are searched many at once on one decode session whose candidates
fork the episode's KV cache (``agentrl.planning.search_batch``, ``greedy_first=False``); a
generator without sessions plays them one at a time. Both sample candidate ``j`` of a turn
with the same seed, so both keep the same tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentrl.engine.decoder import draw_seeds
from agentrl.planning.lines import (
    Line,
    SearchCost,
    best_of,
    candidate_seed,
    line_trajectory,
    play_turn,
    start_line,
)
from agentrl.planning.search import expand_turn
from agentrl.planning.search_batch import BatchedSearch
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


def sibling_trajectory(line: Line, sample: Any, branch: Line, episode: int,
                       spec: EpisodeSpec) -> Trajectory:  # fmt: skip
    """One candidate of a turn: ``line``'s history (mask 0) then the candidate's own tokens
    (mask 1), rewarded with its branch's value; its group id is set with its siblings'
    (``_numbered``)."""
    history = list(line.ids)
    ids = branch.ids[len(history) : len(history) + len(sample.ids)]
    n = len(ids)
    return Trajectory(
        task_id=f"sibling-{episode}-{line.turn}", group_id=0,
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
    seed: int | None = None,
    batched: bool | None = None,
) -> tuple[list[Trajectory], SearchCost]:
    """Training episodes with tree search (module docstring): the episodes in spec order,
    then their siblings (by episode, then turn).

    Candidate ``j`` of turn ``t`` of episode ``n`` samples with ``candidate_seed(seed + n, t,
    j)`` (``seed`` None: one draw of torch's global RNG). ``batched``: search the episodes many
    at once on one decode session (``agentrl.planning.search_batch``); default: whenever the
    generator has sessions (the engine does). Both paths play the same tokens."""
    if k < 2 or depth < 1:
        raise ValueError(f"a search rollout needs k >= 2 and depth >= 1, got k={k}, depth={depth}")
    cost, start = SearchCost(), time.perf_counter()
    bases = draw_seeds(len(specs), seed)
    turns: list[list[Trajectory]] = []  # one sibling set per (episode, turn)

    def on_choice(n, line, candidates, branches):
        turns.append([sibling_trajectory(line, c, b, n, specs[n])
                      for c, b in zip(candidates, branches, strict=True)])  # fmt: skip

    if batched is None:
        batched = getattr(generator, "supports_sessions", False)
    args = (generator, make_env, specs, k, depth, temperature, max_new_tokens, max_total_tokens,
            scorer)  # fmt: skip
    if batched:
        episodes = BatchedSearch(*args, None, cost, greedy_first=False, top_p=top_p, seeds=bases,
                                 on_choice=on_choice).run()  # fmt: skip
    else:
        episodes = [_search_one(*args, cost, top_p, base, n, on_choice)
                    for n, base in enumerate(bases)]  # fmt: skip
    cost.seconds = time.perf_counter() - start
    return episodes + _numbered(turns), cost


def _search_one(generator, make_env, specs, k, depth, temperature, max_new, max_total, scorer,
                cost, top_p, base, n, on_choice) -> Trajectory:  # fmt: skip
    """Episode ``n`` searched on its own: each turn one batch over its K candidates."""
    spec, tok = specs[n], generator.tokenizer
    line, task_id = start_line(tok, make_env, spec, max_total)
    while line.ended is None:
        seeds = [candidate_seed(base, line.turn, j) for j in range(k)]
        candidates, branches = expand_turn(
            generator, make_env, line, k, depth, temperature, max_new, max_total, cost, scorer,
            greedy_first=False, top_p=top_p, seeds=seeds,
        )  # fmt: skip
        on_choice(n, line, candidates, branches)
        best = best_of(candidates, branches)
        cost.episode_tokens += len(best.ids)
        play_turn(line, best, tok, max_total)
    return line_trajectory(line, spec, task_id)


def _numbered(turns: list[list[Trajectory]]) -> list[Trajectory]:
    """The sibling sets in (episode, turn) order, each a group of its own (ids from
    ``SIBLING_GROUP_BASE`` down)."""
    turns = sorted(turns, key=lambda s: (s[0].info["sibling_of"], s[0].info["search_turn"]))
    out = []
    for n, siblings in enumerate(turns):
        for t in siblings:
            t.group_id = SIBLING_GROUP_BASE - n
        out += siblings
    return out
