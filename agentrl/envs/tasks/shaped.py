"""``ShapedTaskEnv``: ``ToolTaskEnv`` plus family process rewards and a staged reference solver.

The task families of the curriculum (meeting, shop, math, library, dynamic) need two things
the generic env does not give:

- **Process rewards** (MISSION C): a family may define ``process_layers(instance, call_log)``
  returning ``{layer: value}``; the layers are added to the episode's ``RewardBreakdown``
  next to the shaper's (``format`` ... ``completion``, ``repeat``), so every one is logged on
  its own. ``progress`` (fraction of the task's milestones reached) and ``reask`` (calls
  that fetched information the dialogue already held) are the usual two; their weights are
  the run's (``reward.progress``, ``reward.reask``: the env's ``reward_weights``). A layer
  of its own a family weighs itself: ``{layer: (weight, value)}``.
- **Several calls per turn**: a family may put ``stages`` (one int per expected call) in
  ``instance.data``; the reference solver then issues every missing call of the lowest
  unfinished stage in one assistant turn (several ``<tool_call>`` blocks, as the Qwen2.5
  template renders parallel calls). A family may also mark results as unusable
  (``result_usable``), e.g. garbage from a flaky tool, so the reference retries them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from agentrl.envs.core import ToolTaskEnv
from agentrl.envs.reference import format_call, successful_results, with_note
from agentrl.envs.registry import split_env_kwargs
from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.types import RewardBreakdown


def usable_log(
    family: TaskFamily, instance: TaskInstance, call_log: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``call_log`` with results the family calls unusable marked as failed."""
    check = getattr(family, "result_usable", None)
    if check is None:
        return list(call_log)
    return [
        {**e, "ok": e["ok"] and bool(check(instance, e["name"], e["content"]))} for e in call_log
    ]


def staged_reference_action(
    family: TaskFamily, instance: TaskInstance, call_log: Sequence[dict[str, Any]]
) -> str:
    """All missing expected calls of the lowest unfinished stage, or the final answer."""
    log = usable_log(family, instance, call_log)
    results = successful_results(instance.expected_calls, log)
    stages = instance.data.get("stages") or list(range(len(instance.expected_calls)))
    missing = [i for i in range(len(instance.expected_calls)) if i not in results]
    if not missing:
        return family.reference_answer(instance, results)
    stage = min(stages[i] for i in missing)
    calls = [instance.expected_calls[i] for i in missing if stages[i] == stage]
    return with_note(family, instance, results, "\n".join(format_call(c) for c in calls))


def duplicate_results(call_log: Sequence[dict[str, Any]], ignore: Sequence[str] = ()) -> int:
    """Calls whose successful result repeats one already seen, made with other arguments.

    Identical calls are the shaper's ``repeat``; this counts re-asking for known information
    in other words (e.g. ``view_item`` of an item already viewed through another query).
    """
    seen: dict[str, str] = {}
    count = 0
    for e in call_log:
        if not e["ok"] or e["name"] in ignore:
            continue
        key = json.dumps([e["name"], e["arguments"]], sort_keys=True, default=str)
        if seen.get(e["content"], key) != key:
            count += 1
        seen.setdefault(e["content"], key)
    return count


class ShapedTaskEnv(ToolTaskEnv):
    """A ``ToolTaskEnv`` whose breakdown adds the family's process layers (module docstring)."""

    def finish(self, reason: str) -> RewardBreakdown:
        """Score the episode; the family's process layers join the shaper's layers."""
        already_scored = self.done and self.breakdown is not None
        breakdown = super().finish(reason)  # checks ``reason`` even when already scored
        if already_scored:
            return breakdown
        layers_fn = getattr(self.family, "process_layers", None)
        if layers_fn is not None and self.instance is not None:
            for name, scored in layers_fn(self.instance, self.call_log).items():
                own = isinstance(scored, tuple)
                weight, value = scored if own else (self._weight(name), scored)
                breakdown.layers[name] = float(value)
                breakdown.weights[name] = float(weight)
        return breakdown

    def _weight(self, layer: str) -> float:
        weights = self.shaper.process_weights
        if layer not in weights:
            raise ValueError(
                f"{self.family.name!r}: process layer {layer!r} has no reward weight (known: "
                f"{', '.join(weights)}); return (weight, value) for a layer of its own"
            )
        return weights[layer]

    def reference_action(self) -> str:
        """The staged reference solver's next action (see the module docstring)."""
        if self.instance is None:
            raise RuntimeError("reference_action() before reset()")
        return staged_reference_action(self.family, self.instance, self.call_log)


def shaped_factory(family_cls: type[TaskFamily], **fixed: Any) -> Callable[..., ShapedTaskEnv]:
    """A ``make`` factory: env keywords to ``ShapedTaskEnv``, the rest to the family."""

    def factory(**kwargs: Any) -> ShapedTaskEnv:
        env_kwargs = split_env_kwargs(kwargs)
        return ShapedTaskEnv(family_cls(**{**fixed, **kwargs}), **env_kwargs)

    factory.__name__ = f"make_shaped_{family_cls.__name__}"
    return factory
