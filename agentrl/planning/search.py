"""Value-guided tree search at a turn (seed 000 §1.1): expand K actions, look ahead, keep the best.

At every turn of an episode the policy proposes K candidate actions from the same history:
the greedy one and K-1 sampled at ``temperature``. Each candidate is played in a branch (a
fresh env restored from the episode's snapshot, ``agentrl.envs.snapshot``) and followed
greedily for up to ``depth - 1`` more turns. A branch that ends is worth its episode reward;
one still running after the lookahead is worth what it has earned so far (its reward layers
scored as if it stopped there: format, tool choice, arguments, progress; no completion), or,
with a PPO run's critic (``scorer``, ``agentrl.planning.value``), its predicted return. The
episode takes the best candidate (ties: the greedy one) and moves on; the branches are
dropped. K = 1 is plain greedy decoding.

With an engine (``supports_sessions``) the episodes are searched many at once on one decode
session whose branches fork the episode's KV cache (``agentrl.planning.search_batch``). A
generator without sessions (a scripted policy) plays them one at a time here: each turn's
generations are one batch over its branches (the K-1 samples, then each lookahead turn of
the K branches), which share the episode's history, prefilled again every turn. Candidate j
of turn t samples with ``candidate_seed``, so both paths keep the same tokens.

Cost is reported next to success: tokens generated (episodes and branches) and seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentrl.planning.lines import (
    SearchCost,
    best_of,
    branch_from,
    candidate_seed,
    line_trajectory,
    play_turn,
    start_line,
    value_running,
)
from agentrl.planning.search_batch import BatchedSearch
from agentrl.rollout import EpisodeSpec
from agentrl.types import Trajectory


def search_episodes(
    generator: Any,
    make_env: Callable[[], Any],
    specs: list[EpisodeSpec],
    *,
    k: int,
    depth: int = 1,
    temperature: float = 0.8,
    max_new_tokens: int = 96,
    max_total_tokens: int = 1024,
    on_episode: Callable[[int, int], None] | None = None,
    scorer: Callable[[list[list[int]]], list[float]] | None = None,
    batched: bool | None = None,
) -> tuple[list[Trajectory], SearchCost]:
    """Play each spec's episode with tree search (module docstring); trajectories in order.

    ``scorer``: values for branches still running after the lookahead, from their token
    ids (``agentrl.planning.value.critic_scorer``: a PPO critic); default: the reward layers
    they earned so far. ``batched``: search many episodes at once on one decode session
    (``agentrl.planning.search_batch``); default: whenever the generator has sessions (the
    engine does; a scripted policy plays the episodes one at a time)."""
    if k < 1 or depth < 1:
        raise ValueError(f"tree search needs k >= 1 and depth >= 1, got k={k}, depth={depth}")
    cost, start = SearchCost(), time.perf_counter()
    if batched is None:
        batched = getattr(generator, "supports_sessions", False)
    if batched:
        trajs = BatchedSearch(generator, make_env, specs, k, depth, temperature, max_new_tokens,
                              max_total_tokens, scorer, on_episode, cost).run()  # fmt: skip
        cost.seconds = time.perf_counter() - start
        return trajs, cost
    trajs = []
    for n, spec in enumerate(specs, 1):
        trajs.append(_search_episode(generator, make_env, spec, k, depth, temperature,
                                     max_new_tokens, max_total_tokens, cost, scorer))  # fmt: skip
        if on_episode is not None:
            on_episode(n, len(specs))
    cost.seconds = time.perf_counter() - start
    return trajs, cost


def _search_episode(generator, make_env, spec, k, depth, temperature, max_new, max_total, cost,
                    scorer):  # fmt: skip
    tok = generator.tokenizer
    line, task_id = start_line(tok, make_env, spec, max_total)
    while line.ended is None:
        sample = _best_candidate(generator, make_env, line, k, depth, temperature, max_new,
                                 max_total, cost, scorer, spec.seed)  # fmt: skip
        cost.episode_tokens += len(sample.ids)
        play_turn(line, sample, tok, max_total)
    return line_trajectory(line, spec, task_id)


def _best_candidate(generator, make_env, line, k, depth, temperature, max_new, max_total, cost,
                    scorer=None, seed=0):  # fmt: skip
    """The greedy action and K-1 sampled ones from ``line``'s history, each played in a
    restored branch and followed greedily ``depth - 1`` turns; the best by branch value."""
    if k == 1:
        (greedy,) = generator.generate([line.ids], max_new_tokens=max_new, greedy=True)
        return greedy
    seeds = [candidate_seed(seed, line.turn, j) for j in range(1, k)]
    candidates, branches = expand_turn(generator, make_env, line, k, depth, temperature,
                                       max_new, max_total, cost, scorer, seeds=seeds)  # fmt: skip
    return best_of(candidates, branches)


def expand_turn(generator, make_env, line, k, depth, temperature, max_new, max_total, cost,
                scorer=None, greedy_first=True, top_p=1.0, seeds=None):  # fmt: skip
    """K candidate actions from ``line``'s history (the greedy one first, or all K sampled),
    each played in a branch restored from the episode's snapshot and followed greedily
    ``depth - 1`` turns, every branch valued; returns (candidates, branches).

    Each generation is one batch over the branches of this turn, whose shared history the
    engine prefills once. ``seeds``: the sampled candidates' seeds (None: drawn).
    """
    candidates = []
    if greedy_first:
        candidates += generator.generate([line.ids], max_new_tokens=max_new, greedy=True)
    n = k - len(candidates)
    seeded = {} if seeds is None else {"seeds": list(seeds)}
    candidates += generator.generate([line.ids] * n, max_new_tokens=max_new,
                                     temperature=temperature, top_p=top_p, **seeded)  # fmt: skip
    snap = line.env.snapshot()
    branches = []
    for sample in candidates:
        branch = branch_from(line, make_env, snap)
        play_turn(branch, sample, generator.tokenizer, max_total)
        branches.append(branch)
        cost.branch_tokens += len(sample.ids)
    cost.branches += len(branches)
    for _ in range(depth - 1):
        running = [b for b in branches if b.ended is None]
        if not running:
            break
        outs = generator.generate([b.ids for b in running], max_new_tokens=max_new, greedy=True)
        for branch, sample in zip(running, outs, strict=True):
            cost.branch_tokens += len(sample.ids)
            play_turn(branch, sample, generator.tokenizer, max_total)
    value_running(branches, scorer)
    return candidates, branches
