"""Library: an open tool library (curriculum stage 3, ``make("library")``).

Every tool of the built-in families (weather, meeting, shop and, when reasoning-gym is
installed, math) is offered at once; each task comes from one family and needs only a subset,
so choosing the right tools among ~15 is part of the task. Verification, process layers and
the reference solver are the chosen family's own. Library level ``L`` draws family level
``L`` (weather and math have no level 0, so the library's levels are 1-3).

``family_kwargs`` sets a member family's own options, e.g. ``{"weather": {"answer_style":
"evidence"}, "meeting": {"probe_slots": True}}`` (``task.env_kwargs.family_kwargs`` in a config).
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import Any

from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.envs.tasks.meeting import MeetingFamily
from agentrl.envs.tasks.shop import ShopFamily
from agentrl.envs.tasks.weather import WeatherFamily
from agentrl.tools.registry import Tool

SYSTEM_PROMPT = (
    "You are an assistant with many tools. Use only the tools the request needs; write times "
    "as 24-hour HH:MM and dates as YYYY-MM-DD."
)


def default_families(family_kwargs: dict[str, dict[str, Any]] | None = None) -> list[TaskFamily]:
    """weather, meeting, shop, and math when reasoning-gym is importable; each built with its
    entry of ``family_kwargs`` (a family name -> its constructor's keywords)."""
    options = dict(family_kwargs or {})
    makers: dict[str, Callable[..., TaskFamily]] = {
        "weather": WeatherFamily, "meeting": MeetingFamily, "shop": ShopFamily, "math": _math,
    }  # fmt: skip
    unknown = sorted(set(options) - set(makers))
    if unknown:
        raise ValueError(
            f"library family_kwargs: no member family {unknown}; members: {sorted(makers)}"
        )
    families = []
    for name, make in makers.items():
        try:
            families.append(_build(name, make, options.get(name) or {}))
        except ImportError as e:  # math without reasoning-gym: said once, not dropped silently
            warnings.warn(f"library tasks without {name}: {e}", stacklevel=2)
    return families


def _math(**kwargs: Any) -> TaskFamily:
    """The math family, imported only here: it needs the optional reasoning-gym."""
    from agentrl.envs.tasks.mathgym import MathFamily

    return MathFamily(**kwargs)


def _build(name: str, make: Callable[..., TaskFamily], kwargs: dict[str, Any]) -> TaskFamily:
    """``make(**kwargs)``; a keyword it does not take is named with the family."""
    if not isinstance(kwargs, dict):
        raise ValueError(f"library family_kwargs[{name!r}] must be a mapping, got {kwargs!r}")
    try:
        return make(**kwargs)
    except TypeError as e:
        raise ValueError(f"library family_kwargs[{name!r}]: {e}") from e


class LibraryFamily(TaskFamily):
    """Tasks of several families, all their tools offered together."""

    name = "library"
    levels = (1, 2, 3)
    system_prompt = SYSTEM_PROMPT

    def __init__(
        self,
        families: list[TaskFamily] | None = None,
        family_kwargs: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        if families is not None and family_kwargs:
            raise ValueError("library: pass families or family_kwargs, not both")
        self.families = {f.name: f for f in (families or default_families(family_kwargs))}
        self._probes = {n: self._probe(f) for n, f in self.families.items()}
        names = [t.name for n, f in self.families.items() for t in f.tools(self._probes[n])]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"library: tool names used by several families: {dupes}")

    @staticmethod
    def _probe(family: TaskFamily) -> TaskInstance:
        level = 1 if 1 in family.levels else family.levels[0]
        return family.sample(random.Random(0), level)

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        """A task of a family drawn from ``rng``, at the family's level ``level``."""
        name = rng.choice(sorted(self.families))
        inner = self.families[name].sample(rng, level)
        data = {"family": name, "inner": inner, "stages": inner.data.get("stages")}
        return TaskInstance(
            f"library-{inner.task_id}", level, inner.prompt, data, list(inner.expected_calls)
        )

    def _inner(self, instance: TaskInstance) -> tuple[TaskFamily, TaskInstance]:
        return self.families[instance.data["family"]], instance.data["inner"]

    def tools(self, instance: TaskInstance) -> list[Tool]:
        """Every family's tools: the chosen one's bound to the task, the others to a probe."""
        out: list[Tool] = []
        for name, fam in sorted(self.families.items()):
            chosen = name == instance.data["family"]
            bound = instance.data["inner"] if chosen else self._probes[name]
            out += fam.tools(bound)
        return out

    def check_answer(self, instance: TaskInstance, answer: str) -> bool:
        """The chosen family's verifier."""
        fam, inner = self._inner(instance)
        return fam.check_answer(inner, answer)

    def reference_answer(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """The chosen family's reference answer."""
        fam, inner = self._inner(instance)
        return fam.reference_answer(inner, results)

    def reference_note(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """The chosen family's note before its reference calls (e.g. meeting's with
        ``probe_slots``), or nothing."""
        fam, inner = self._inner(instance)
        fn = getattr(fam, "reference_note", None)
        return fn(inner, results) if fn else ""

    def process_layers(self, instance: TaskInstance, call_log: list[dict]) -> dict[str, float]:
        """The chosen family's process layers (none for weather)."""
        fam, inner = self._inner(instance)
        fn = getattr(fam, "process_layers", None)
        return fn(inner, call_log) if fn else {}
