"""Task families: what a custom task defines (about 40 lines, see ``examples/custom_tool_env.py``).

A ``TaskFamily`` samples ``TaskInstance``s (a prompt plus a hidden world in ``data``), gives
the tools bound to an instance's world, and verifies final answers with rules. The generic
``ToolTaskEnv`` (``envs/core.py``) turns any family into an environment, and the generic
reference solver (``envs/reference.py``) solves any instance from ``expected_calls`` and
``reference_answer``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from agentrl.tools.registry import Tool
from agentrl.types import ToolCall


@dataclass
class TaskInstance:
    """One task: the user's request, its hidden world and the calls that solve it."""

    task_id: str  # unique per instance (e.g. family, level and a seeded hash)
    level: int  # difficulty level, one of the family's ``levels``
    prompt: str  # the user message
    data: dict[str, Any] = field(default_factory=dict)  # the world the tools read
    expected_calls: list[ToolCall] = field(default_factory=list)  # a solution, in order


class TaskFamily:
    """Base class of a task family; a subclass overrides the four methods.

    ``name`` names the family, ``levels`` its difficulty levels (easiest first) and
    ``system_prompt`` the optional system message (keep it short: small models, small
    contexts); ``replayable = False`` if its tools are not deterministic given the instance.
    ``tools(instance)`` must return the same names and schemas for every instance.
    Optional: ``reference_note(instance, results) -> str``, a line of working the reference
    solver writes before its next calls (``envs/reference.py: with_note``).
    """

    name: str = "task"
    levels: tuple[int, ...] = (1,)
    system_prompt: str | None = None
    #: the tools are deterministic given the instance, so an episode's state can be rebuilt
    #: by replaying its turns (``env.snapshot()`` / ``env.restore()``, for tree search)
    replayable: bool = True

    def tools(self, instance: TaskInstance) -> list[Tool]:
        """The tools, bound to ``instance``'s world (called once per episode)."""
        raise NotImplementedError(f"{type(self).__name__}.tools")

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        """A new instance at ``level``, drawn only from ``rng`` (so seeds reproduce it).

        ``level`` is one of ``levels``: ``ToolTaskEnv.reset`` checks it, so ``sample`` need not.
        """
        raise NotImplementedError(f"{type(self).__name__}.sample")

    def check_answer(self, instance: TaskInstance, answer: str) -> bool:
        """The rule-based verifier: is ``answer`` a correct final reply to the user?"""
        raise NotImplementedError(f"{type(self).__name__}.check_answer")

    def reference_answer(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """The final reply, given ``results[i]`` = the decoded JSON result of
        ``instance.expected_calls[i]`` (its successful result)."""
        raise NotImplementedError(f"{type(self).__name__}.reference_answer")
