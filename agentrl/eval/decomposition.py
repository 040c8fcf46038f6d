"""How well episodes decomposed their task, from the calls they made (ReAct or planned).

A plan's decomposition accuracy (``agentrl.planning.decomposition_accuracy``) scores what the
planner wrote. ``call_decomposition`` scores what any episode did: the share of the reference
solver's sub-tasks (``instance.expected_calls``) that the episode's own tool calls made, in
order, each named by its tool and the argument values the request gives. It is the ReAct
counterpart of the seed's "single-turn decisions" figure, and plan-and-execute episodes get it
too, so the two modes compare on the same measure.

``first_tool_rate`` (overall and ``first_tool_by_level``) is the share of episodes whose first
call names the tool of the reference solver's first call: among distractor tools (dynamic
tools, the library) it separates choosing the tool from using it. Where the episodes come from
several families (the library), ``first_tool_by_family`` says which family's requests send the
model to the wrong tool.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from agentrl.eval.task_ids import task_family
from agentrl.planning.plan import decomposition_accuracy
from agentrl.rollout import EpisodeSpec
from agentrl.types import Trajectory


def call_steps(tool_calls: list[dict[str, Any]]) -> list[str]:
    """The episode's calls as plan-like steps: ``name {"arg": value, ...}``."""
    return [
        f"{c.get('name', '')} {json.dumps(c.get('arguments') or {}, ensure_ascii=False)}"
        for c in tool_calls
    ]


def call_decomposition(
    trajs: list[Trajectory], specs: list[EpisodeSpec], make_env: Callable[[], Any]
) -> dict[str, Any]:
    """``call_decomposition_accuracy``, ``first_tool_rate``, ``first_tool_by_level`` and (for
    episodes of several families) ``first_tool_by_family`` over episodes whose family lists the
    expected calls ({} when none does, or for team episodes).
    Each spec's instance is drawn again by a fresh env reset with the episode's seed and level
    (instances are functions of both)."""
    if len(trajs) != len(specs):  # a team env (agentrl.multiagent): a trajectory per agent
        return {}
    scores = []
    first_right: dict[int, list[bool]] = defaultdict(list)
    first_by_family: dict[str | None, list[bool]] = defaultdict(list)
    for traj, spec in zip(trajs, specs, strict=True):
        instance = _instance(make_env, spec)
        expected = getattr(instance, "expected_calls", None)
        if expected is None:
            continue
        steps = call_steps(traj.tool_calls)
        scores.append(decomposition_accuracy(steps, list(expected), instance.prompt))
        if expected:
            first = traj.tool_calls[0].get("name") if traj.tool_calls else None
            right = first == expected[0].name
            first_right[spec.level].append(right)
            first_by_family[task_family(traj.task_id)].append(right)
    if not scores:
        return {}
    out: dict[str, Any] = {"call_decomposition_accuracy": sum(scores) / len(scores)}
    if first_right:
        every = [ok for oks in first_right.values() for ok in oks]
        out["first_tool_rate"] = sum(every) / len(every)
        out["first_tool_by_level"] = {
            str(k): sum(v) / len(v) for k, v in sorted(first_right.items())
        }
    if len(first_by_family) > 1 and None not in first_by_family:
        out["first_tool_by_family"] = {
            k: sum(v) / len(v) for k, v in sorted(first_by_family.items())
        }
    return out


def _instance(make_env: Callable[[], Any], spec: EpisodeSpec) -> Any:
    """The task instance of ``spec`` (None for an env without one), from a fresh env."""
    env = make_env()
    env.reset(seed=spec.seed, options={"level": spec.level})
    instance = getattr(env, "instance", None)
    close = getattr(env, "close", None)
    if callable(close):
        close()
    return instance
