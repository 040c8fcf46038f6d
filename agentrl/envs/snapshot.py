"""Snapshot and restore an episode's state, for branching (tree search, sibling rollouts).

A tool's state lives in closures (a shop's cart, weather's seeded faults), which no deep copy
reaches, so a snapshot is the episode's recipe instead: the drawn instance (as it was before
its tools were built), the reset seed and the assistant turns so far. ``restore_episode``
resets an env (the same one or a fresh one from the same ``make``) to that instance and
replays the turns through the env's own ``step`` (wrappers included), then checks that the
dialogue came out identical: a family whose tools are not deterministic given the instance
fails loudly (``SnapshotMismatch``) rather than branching from a different state.

A family opts out with ``replayable = False`` (its tools have side effects outside the
episode, or read the clock); ``snapshot()`` then raises ``SnapshotUnsupported``. Replayed
calls run the tools again: they count in the guard's call and failure counters.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from agentrl.envs.task import TaskInstance


class SnapshotUnsupported(RuntimeError):
    """The env cannot rebuild its state by replay (``family.replayable`` is False)."""


class SnapshotMismatch(RuntimeError):
    """Replaying a snapshot gave a different dialogue: the tools are not deterministic."""


@dataclass(frozen=True)
class EnvSnapshot:
    """An episode's state as a recipe: rebuild it with ``restore_episode(env, snap)``."""

    seed: int
    instance: TaskInstance  # a private copy, taken before ``tools()`` bound state to it
    actions: tuple[str, ...]  # the assistant turns, raw text, in order
    digest: str  # of the dialogue at snapshot time (``dialogue_digest``)

    @property
    def turn(self) -> int:
        """Assistant turns taken."""
        return len(self.actions)


def dialogue_digest(messages: list[dict[str, Any]]) -> str:
    """A short hash of a dialogue (role, content and tool calls of every message)."""
    text = json.dumps(messages, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def take_snapshot(env: Any) -> EnvSnapshot:
    """The snapshot of ``env``'s running episode (it must have been reset and not ended)."""
    family = getattr(env, "family", None)
    if family is not None and not getattr(family, "replayable", True):
        raise SnapshotUnsupported(f"{family.name!r} declares replayable = False")
    recipe = getattr(env, "episode_recipe", None)
    if recipe is None:
        raise SnapshotUnsupported(f"{type(env).__name__} has no episode to snapshot (reset first)")
    if env.done:
        raise SnapshotUnsupported("the episode has ended: nothing to branch from")
    seed, instance, actions = recipe
    return EnvSnapshot(seed, copy.deepcopy(instance), tuple(actions), dialogue_digest(env.messages))


def restore_episode(env: Any, snap: EnvSnapshot) -> list[dict[str, Any]]:
    """Put ``env`` (any env built like the snapshot's) in the snapshot's state; returns the
    dialogue. Raises ``SnapshotMismatch`` when the replay does not reproduce it."""
    env.reset(seed=snap.seed, options={"instance": copy.deepcopy(snap.instance)})
    for i, action in enumerate(snap.actions):
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            raise SnapshotMismatch(f"the replay ended at turn {i + 1} of {len(snap.actions)}")
    if dialogue_digest(env.messages) != snap.digest:
        raise SnapshotMismatch(
            f"replaying {len(snap.actions)} turn(s) gave a different dialogue: "
            f"{getattr(getattr(env, 'family', None), 'name', type(env).__name__)!r}'s tools are "
            "not deterministic given the instance (set replayable = False on the family)"
        )
    return [dict(m) for m in env.messages]
