"""Tree search batched across episodes, on one decode session (``agentrl.engine.session``).

The search of ``agentrl.planning.search`` (K candidates a turn, each followed ``depth - 1``
turns in a restored env, the best kept), played for many episodes at once:

- each candidate is a sequence of the session; the greedy candidate continues the episode's
  own sequence and the K-1 sampled ones are forks of it (``DecodeSession.fork``): they copy
  its KV cache instead of computing the history again;
- a branch's lookahead turns continue its sequence, so only what the env added is prefilled;
- the kept candidate's sequence becomes the episode's (rewound to its first turn when it
  looked ahead: ``DecodeSession.rewind``); the others are released;
- as many episodes search at once as the session's slots hold K candidates each, and every
  forward of the session decodes the candidates of all of them.

Candidate ``j`` of turn ``t`` samples with seed ``candidate_seed(spec.seed, t, j)``, as the
one-episode path does, so both paths choose the same actions (up to rounding).

The training search (``agentrl.planning.search_train``) runs here too with
``greedy_first=False``: the candidate that continues the episode's sequence samples as well
(seeded afresh each turn), and ``on_choice`` hands each turn's candidates and branches over
for the per-turn siblings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.planning.lines import (
    Line,
    SearchCost,
    best_of,
    branch_from,
    candidate_seed,
    line_trajectory,
    play_turn,
    start_line,
    value_running,
)
from agentrl.rollout import EpisodeSpec
from agentrl.types import Trajectory

GREEDY = (True, 1.0, 1.0)  # a session's (greedy, temperature, top_p)


@dataclass
class _Candidate:
    key: tuple[int, int, int]  # (episode, turn it was proposed at, j)
    branch: Line
    first: Any = None  # its sampled first turn (a Sample)
    first_cached: int = 0  # the session's cached tokens when that turn ended
    turns: int = 0  # turns its branch has played


@dataclass
class _Episode:
    index: int
    spec: EpisodeSpec
    line: Line
    task_id: str
    key: tuple[int, int, int] | None = None  # the session sequence holding the line's cache
    candidates: list[_Candidate] = field(default_factory=list)


class BatchedSearch:
    """One ``search_episodes`` call on an engine with sessions; ``run`` returns trajectories."""

    def __init__(self, engine, make_env, specs, k, depth, temperature, max_new, max_total,
                 scorer, on_episode, cost: SearchCost, *, greedy_first: bool = True,
                 top_p: float = 1.0, seeds: list[int] | None = None,
                 on_choice=None) -> None:  # fmt: skip
        """``greedy_first`` False (the training search): every candidate is sampled, the
        first one too; ``seeds``: each episode's base of ``candidate_seed`` (default: its
        spec's seed); ``on_choice(episode, line, first turns, branches)``: called at each
        turn before the best candidate is played on ``line``."""
        self.engine, self.tok, self.make_env, self.specs = engine, engine.tokenizer, make_env, specs
        self.k, self.depth = k, depth if k > 1 else 1
        self.sampled = (False, temperature, top_p)
        self.first = GREEDY if greedy_first else self.sampled
        self.seeds = [s.seed for s in specs] if seeds is None else list(seeds)
        self.on_choice = on_choice
        self.max_new, self.max_total, self.scorer = max_new, max_total, scorer
        self.on_episode, self.cost = on_episode, cost
        self.owner: dict[tuple, tuple[_Episode, int]] = {}
        self.out: list[Trajectory | None] = [None] * len(specs)
        self.finished = 0

    def run(self) -> list[Trajectory]:
        episodes = []
        for i, spec in enumerate(self.specs):
            line, task_id = start_line(self.tok, self.make_env, spec, self.max_total)
            episodes.append(_Episode(i, spec, line, task_id))
        capacity = self.max_total + self.max_new
        self.sess = self.engine.session(len(episodes) * self.k, capacity)
        slots = len(self.sess.slots)
        if slots < self.k:
            raise ValueError(f"tree search with K={self.k} needs {self.k} KV-cache slots of "
                             f"{capacity} tokens; memory fits {slots}")  # fmt: skip
        shared = self.engine.shared_prefix([e.line.ids for e in episodes])
        if shared:
            self.sess.set_prefix(episodes[0].line.ids[:shared])
        waiting, width = list(episodes), slots // self.k
        active = 0
        while waiting or active:
            while waiting and active < width:
                active += self._begin(waiting.pop(0))
            for key, sample in self.sess.step():
                ep, j = self.owner[key]
                active -= self._turn_ended(ep, j, sample)
        return list(self.out)  # type: ignore[arg-type]

    # -- an episode's turns ----------------------------------------------------------------
    def _begin(self, ep: _Episode) -> int:
        """Start ``ep``'s first turn (1), or record it at once when its prompt ended it (0)."""
        if ep.line.ended is not None:
            self._finish(ep)
            return 0
        ep.key = (ep.index, 0, 0)
        self.sess.add(ep.key, ep.line.ids, self.max_new, self._seed(ep, 0), self.first)
        self._propose(ep)
        return 1

    def _propose(self, ep: _Episode) -> None:
        """The greedy candidate continues ``ep.key``; K-1 sampled forks of it join."""
        turn = ep.line.turn
        snap = ep.line.env.snapshot() if self.k > 1 else None
        ep.candidates = [self._candidate(ep, ep.key, snap)]
        for j in range(1, self.k):
            key = (ep.index, turn, j)
            self.sess.fork(key, ep.key, self.max_new, self._seed(ep, j), self.sampled)
            ep.candidates.append(self._candidate(ep, key, snap))
        for j, c in enumerate(ep.candidates):
            self.owner[c.key] = (ep, j)

    def _seed(self, ep: _Episode, j: int) -> int:
        return candidate_seed(self.seeds[ep.index], ep.line.turn, j)

    def _candidate(self, ep: _Episode, key, snap) -> _Candidate:
        if snap is None:  # K = 1: the episode's own line plays the turn
            return _Candidate(key, ep.line)
        return _Candidate(key, branch_from(ep.line, self.make_env, snap))

    def _done(self, c: _Candidate) -> bool:
        """No more lookahead for ``c``: its branch ended, or it played ``depth`` turns."""
        return c.turns > 0 and (c.branch.ended is not None or c.turns >= self.depth)

    def _turn_ended(self, ep: _Episode, j: int, sample) -> int:
        """A candidate's turn ended: play it; look further ahead, or choose once all are done.
        Returns 1 when the episode finished."""
        c = ep.candidates[j]
        if self.k == 1:
            self.cost.episode_tokens += len(sample.ids)
            return self._continue(ep, c, _play_delta(ep.line, sample, self.tok, self.max_total))
        if c.turns == 0:
            c.first, c.first_cached = sample, self.sess.cached(c.key)
        self.cost.branch_tokens += len(sample.ids)
        delta = _play_delta(c.branch, sample, self.tok, self.max_total)
        c.turns += 1
        if not self._done(c):
            self.sess.extend(c.key, delta, self.max_new, GREEDY)
            return 0
        if not all(self._done(x) for x in ep.candidates):
            return 0
        return self._choose(ep)

    def _choose(self, ep: _Episode) -> int:
        """Value the branches, play the best candidate on the episode, drop the others."""
        value_running([c.branch for c in ep.candidates], self.scorer)
        best = best_of(ep.candidates, [c.branch for c in ep.candidates])
        if self.on_choice is not None:
            self.on_choice(ep.index, ep.line, [c.first for c in ep.candidates],
                           [c.branch for c in ep.candidates])  # fmt: skip
        self.cost.branches += len(ep.candidates)
        self.cost.episode_tokens += len(best.first.ids)
        for c in ep.candidates:
            del self.owner[c.key]
            if c is not best:
                self.sess.release(c.key)
        self.owner[best.key] = (ep, 0)
        delta = _play_delta(ep.line, best.first, self.tok, self.max_total)
        if delta is not None and best.turns > 1:  # forget its lookahead
            self.sess.rewind(best.key, best.first_cached, best.first.ids[-1:])
        return self._continue(ep, best, delta)

    def _continue(self, ep: _Episode, kept: _Candidate, delta: list[int] | None) -> int:
        """The next turn of ``ep`` from the kept candidate's sequence (1 when it ended)."""
        if delta is None:
            self.owner.pop(kept.key, None)
            self.sess.release(kept.key)
            self._finish(ep)
            return 1
        ep.key = kept.key
        self.sess.extend(ep.key, delta, self.max_new, self.first,
                         seed=None if self.first[0] else self._seed(ep, 0))  # fmt: skip
        if self.k > 1:
            self._propose(ep)
        return 0

    def _finish(self, ep: _Episode) -> None:
        self.out[ep.index] = line_trajectory(ep.line, ep.spec, ep.task_id)
        self.finished += 1
        if self.on_episode is not None:
            self.on_episode(self.finished, len(self.specs))


def _play_delta(line: Line, sample, tok, max_total: int) -> list[int] | None:
    """Play ``sample`` on ``line``; the tokens the env added after it (None: it ended)."""
    before = len(line.ids) + len(sample.ids)
    play_turn(line, sample, tok, max_total)
    return None if line.ended is not None else line.ids[before:]
