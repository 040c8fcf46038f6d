"""Which task instances an RL step plays: one ``Sampler`` protocol, two implementations.

``UniformSampler`` draws each group's level from ``task.levels``; ``CurriculumSampler`` asks
the ``Curriculum`` (dynamic difficulty, or the four stages) and feeds the outcomes back.
Either way a step is ``groups`` task instances, each played ``group_size`` times (GRPO's G),
with training seeds below ``train.seed_limit``.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from agentrl.config import Config
from agentrl.curriculum import Assignment, Curriculum
from agentrl.rollout import EpisodeSpec
from agentrl.types import Trajectory


class Sampler(Protocol):
    def next(self, groups: int, first_group: int) -> list[EpisodeSpec]:
        """``groups`` task instances, ``group_size`` specs each, group ids from ``first_group``."""
        ...

    def update(self, trajs: list[Trajectory]) -> list[str]:
        """Feed a step's finished episodes back; returns events worth printing."""
        ...

    def metrics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any] | None: ...

    def load_state_dict(self, state: dict[str, Any] | None) -> None: ...


class UniformSampler:
    """Seeds and levels drawn uniformly (``rng`` is the loop's: checkpointed with it)."""

    def __init__(self, rng: random.Random, levels: list[int], group_size: int, seed_limit: int):
        self.rng, self.levels = rng, levels
        self.group_size, self.seed_limit = group_size, seed_limit

    def next(self, groups: int, first_group: int) -> list[EpisodeSpec]:
        specs = []
        for g in range(groups):
            seed, level = self.rng.randrange(self.seed_limit), self.rng.choice(self.levels)
            specs += [EpisodeSpec(seed, level, first_group + g)] * self.group_size
        return specs

    def update(self, trajs: list[Trajectory]) -> list[str]:
        return []

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        pass


#: the sampler's key in a curriculum checkpoint: groups drawn whose outcomes are not back yet
PENDING_KEY = "sampler_pending_groups"


class CurriculumSampler:
    """Each group's env and level from the curriculum; harness faults never move levels."""

    def __init__(
        self, curriculum: Curriculum, rng: random.Random, group_size: int, seed_limit: int
    ):
        self.curriculum, self.rng = curriculum, rng
        self.group_size, self.seed_limit = group_size, seed_limit
        #: group id -> its assignment, until its outcomes are back (an asynchronous rollout
        #: draws the next steps' groups before this one's are fed back)
        self.assigned: dict[int, Assignment] = {}

    def next(self, groups: int, first_group: int) -> list[EpisodeSpec]:
        specs = []
        for g, a in enumerate(self.curriculum.next_levels(groups)):
            seed = self.rng.randrange(self.seed_limit)
            self.assigned[first_group + g] = a
            spec = EpisodeSpec(seed, a.level, first_group + g, env_id=a.env_id)
            specs += [spec] * self.group_size
        return specs

    def update(self, trajs: list[Trajectory]) -> list[str]:
        counted = [t for t in trajs if not t.is_harness_fault]
        assignments = [self.assigned[t.group_id] for t in counted]
        for group in {t.group_id for t in trajs}:
            self.assigned.pop(group, None)
        return self.curriculum.update(assignments, [t.success for t in counted])

    def metrics(self) -> dict[str, float]:
        return self.curriculum.metrics()

    def state_dict(self) -> dict[str, Any]:
        return {**self.curriculum.state_dict(), PENDING_KEY: dict(self.assigned)}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            state = dict(state)
            self.assigned = state.pop(PENDING_KEY, {})
            self.curriculum.load_state_dict(state)


def make_curriculum(cfg: Config) -> Curriculum | None:
    """The run's curriculum when ``curriculum.enabled`` (else None).

    Default: dynamic difficulty inside ``cfg.task.env``: levels move by rolling success
    (``promote_above`` / ``demote_below`` over ``window`` episodes) within ``cfg.task.levels``.
    ``curriculum.staged``: the four stages of ``curriculum.stages`` (single tool -> fixed flows
    -> open library -> dynamic tools), every family with its own levels, earlier stages
    reviewed (``review_fraction``).
    """
    c = cfg.curriculum
    if not c.enabled:
        return None
    if c.staged:
        return Curriculum.from_config(c, seed=cfg.train.seed)
    return Curriculum.single(cfg.task.env, cfg.task.levels, promote_above=c.promote_above,
                             demote_below=c.demote_below, window=c.window,
                             level_review=c.level_review, seed=cfg.train.seed)  # fmt: skip


def make_sampler(cfg: Config, rng: random.Random) -> Sampler:
    """The run's sampler: the curriculum's when enabled, else uniform over ``task.levels``."""
    ro, limit = cfg.rollout, cfg.train.seed_limit
    curriculum = make_curriculum(cfg)
    if curriculum is None:
        return UniformSampler(rng, cfg.task.levels, ro.group_size, limit)
    return CurriculumSampler(curriculum, rng, ro.group_size, limit)
