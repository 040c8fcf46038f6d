"""Curriculum: four stages of task families plus success-driven difficulty inside each family.

Stages (MISSION B): 1 single tool (weather) -> 2 several tools in a fixed flow (meeting, shop,
math) -> 3 the open tool library -> 4 dynamic tool registration. Inside a stage every family
has a current level. Each finished episode at that level goes into the family's rolling
window (``window`` episodes); when the window is full:

- success rate > ``promote_above``: the family moves one level up; a family already at its top
  level is *mastered*; when every family of the stage is mastered the next stage opens;
- success rate < ``demote_below``: the family moves one level down, towards its decomposed
  sub-tasks (meeting and shop have a level 0 made of one step of the full flow).

The window is cleared after every change. ``review_fraction`` of the tasks come from earlier
stages (at their last level) and ``level_review`` of a family's own tasks from its lower levels
(those it has passed), so earlier skills are not forgotten; review results never move levels.
The trainer calls ``next_levels(n)`` for the tasks of a step and ``update(assignments,
successes)`` with the outcomes; ``metrics()`` gives the ``curriculum/`` keys to log and
``state_dict()`` / ``load_state_dict()`` go into checkpoints (JSON-safe, RNG included).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Assignment:
    """One task to play: which env, at which level, from which stage (``review``: older)."""

    env_id: str
    level: int
    stage: int
    review: bool = False


def family_levels(env: Any) -> list[int]:
    """The levels of an env's task family (``[1]`` for an env without one)."""
    family = getattr(env, "family", None)
    return list(getattr(family, "levels", None) or [1])


def start_level(levels: Sequence[int]) -> int:
    """Where a family starts: its first level >= 1 (level 0 = decomposed sub-tasks, if any)."""
    return next((lv for lv in levels if lv >= 1), levels[0])


def env_levels(env_id: str) -> list[int]:
    """The levels of a registered env's task family (builds the env once)."""
    from agentrl.envs import make

    return family_levels(make(env_id))


class Curriculum:
    """Stages of env ids with per-family levels moved by rolling success (module docstring)."""

    def __init__(
        self,
        stages: Sequence[Sequence[str]],
        levels: Mapping[str, Sequence[int]] | Callable[[str], Sequence[int]] = env_levels,
        *,
        promote_above: float = 0.8,
        demote_below: float = 0.2,
        window: int = 32,
        review_fraction: float = 0.1,
        level_review: float = 0.0,
        seed: int = 0,
    ) -> None:
        if not stages or any(not s for s in stages):
            raise ValueError(f"curriculum stages must be non-empty lists of env ids: {stages!r}")
        if not 0 <= demote_below < promote_above <= 1:
            raise ValueError(
                f"need 0 <= demote_below < promote_above <= 1, got {demote_below}, {promote_above}"
            )
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not 0 <= level_review <= 1:
            raise ValueError(f"level_review must be in [0, 1], got {level_review}")
        self.stages = [list(s) for s in stages]
        get = levels.__getitem__ if isinstance(levels, Mapping) else levels
        self.levels = {e: sorted(get(e)) for s in self.stages for e in s}
        self.promote_above, self.demote_below = promote_above, demote_below
        self.window, self.review_fraction = window, review_fraction
        self.level_review = level_review
        self.rng = random.Random(seed)
        self.stage = 0
        self.level = {e: start_level(ls) for e, ls in self.levels.items()}
        self.results: dict[str, deque[bool]] = {e: deque(maxlen=window) for e in self.levels}
        self.mastered: set[str] = set()
        self.promotions = 0
        self.demotions = 0

    @classmethod
    def from_config(cls, cfg: Any, levels: Any = env_levels, seed: int = 0) -> Curriculum:
        """From a ``CurriculumConfig`` (``agentrl.config``)."""
        return cls(
            cfg.stages,
            levels,
            promote_above=cfg.promote_above,
            demote_below=cfg.demote_below,
            window=cfg.window,
            review_fraction=cfg.review_fraction,
            level_review=cfg.level_review,
            seed=seed,
        )

    @classmethod
    def single(cls, env_id: str, levels: Sequence[int], **kwargs: Any) -> Curriculum:
        """Dynamic difficulty inside one family only (one stage: no earlier stage to review)."""
        return cls([[env_id]], {env_id: levels}, review_fraction=0.0, **kwargs)

    # -- sampling ----------------------------------------------------------------------------
    def next_levels(self, n: int) -> list[Assignment]:
        """``n`` tasks: the current stage's families (cycled), some from earlier stages."""
        out = []
        families = self.stages[self.stage]
        earlier = [e for s in self.stages[: self.stage] for e in s]
        start = self.rng.randrange(len(families))
        for i in range(n):
            if earlier and self.rng.random() < self.review_fraction:
                env_id = self.rng.choice(earlier)
                out.append(Assignment(env_id, self.level[env_id], self.stage_of(env_id), True))
            else:
                env_id = families[(start + i) % len(families)]
                passed = self.passed_levels(env_id) if self.level_review else []
                if passed and self.rng.random() < self.level_review:
                    out.append(Assignment(env_id, self.rng.choice(passed), self.stage, True))
                else:
                    out.append(Assignment(env_id, self.level[env_id], self.stage))
        return out

    def passed_levels(self, env_id: str) -> list[int]:
        """Levels of ``env_id`` between its starting level and its current one (exclusive)."""
        start = start_level(self.levels[env_id])
        return [lv for lv in self.levels[env_id] if start <= lv < self.level[env_id]]

    def stage_of(self, env_id: str) -> int:
        return next(i for i, s in enumerate(self.stages) if env_id in s)

    # -- feedback ----------------------------------------------------------------------------
    def update(self, assignments: Sequence[Assignment], successes: Sequence[bool]) -> list[str]:
        """Record outcomes; returns the changes made (e.g. ``"meeting: level 1 -> 0"``)."""
        if len(assignments) != len(successes):
            raise ValueError(f"{len(assignments)} assignments but {len(successes)} outcomes")
        events: list[str] = []
        for a, ok in zip(assignments, successes, strict=True):
            current = a.stage == self.stage and a.level == self.level.get(a.env_id)
            if a.review or not current:
                continue  # stale (the level moved since) or review: never moves levels
            self.results[a.env_id].append(bool(ok))
            events += self._maybe_move(a.env_id)
        return events

    def _maybe_move(self, env_id: str) -> list[str]:
        window = self.results[env_id]
        if len(window) < self.window:
            return []
        rate = sum(window) / len(window)
        levels, lv = self.levels[env_id], self.level[env_id]
        events = []
        if rate > self.promote_above:
            if lv < levels[-1]:
                self.level[env_id] = levels[levels.index(lv) + 1]
                events.append(f"{env_id}: level {lv} -> {self.level[env_id]}")
                self.promotions += 1
            else:
                self.mastered.add(env_id)
            window.clear()
            if set(self.stages[self.stage]) <= self.mastered and self.stage + 1 < len(self.stages):
                self.stage += 1
                events.append(f"stage {self.stage} -> {self.stage + 1}")
        elif rate < self.demote_below:
            if lv > levels[0]:
                self.level[env_id] = levels[levels.index(lv) - 1]
                events.append(f"{env_id}: level {lv} -> {self.level[env_id]}")
                self.demotions += 1
            self.mastered.discard(env_id)
            window.clear()
        return events

    # -- logging and checkpoints -------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """``curriculum/stage`` (1-based), per-family level and rolling success, counters."""
        m: dict[str, float] = {
            "curriculum/stage": float(self.stage + 1),
            "curriculum/promotions": float(self.promotions),
            "curriculum/demotions": float(self.demotions),
        }
        for env_id in self.stages[self.stage]:
            window = self.results[env_id]
            m[f"curriculum/{env_id}/level"] = float(self.level[env_id])
            if window:
                m[f"curriculum/{env_id}/success_rate"] = sum(window) / len(window)
        return m

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly (JSON-safe)."""
        version, internal, gauss = self.rng.getstate()
        return {
            "stage": self.stage,
            "level": dict(self.level),
            "results": {e: [int(x) for x in w] for e, w in self.results.items()},
            "mastered": sorted(self.mastered),
            "promotions": self.promotions,
            "demotions": self.demotions,
            "rng": [version, list(internal), gauss],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict()``; env ids must match this curriculum's."""
        unknown = set(state["level"]) - set(self.levels)
        if unknown:
            raise ValueError(f"checkpoint has env ids {sorted(unknown)} not in this curriculum")
        self.stage = int(state["stage"])
        self.level.update({e: int(v) for e, v in state["level"].items()})
        for e, w in state["results"].items():
            self.results[e] = deque((bool(x) for x in w), maxlen=self.window)
        self.mastered = set(state["mastered"])
        self.promotions, self.demotions = int(state["promotions"]), int(state["demotions"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
