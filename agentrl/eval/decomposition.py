"""How well episodes decomposed their task, from the calls they made (ReAct or planned).

A plan's decomposition accuracy (``agentrl.planning.decomposition_accuracy``) scores what the
planner wrote. ``call_decomposition`` scores what any episode did: the share of the reference
solver's sub-tasks (``instance.expected_calls``) that the episode's own tool calls made, in
order, each named by its tool and the argument values the request gives. It is the ReAct
counterpart of the seed's "single-turn decisions" figure, and plan-and-execute episodes get it
too, so the two modes compare on the same measure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

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
) -> dict[str, float]:
    """``{"call_decomposition_accuracy": mean}`` over episodes whose family lists the expected
    calls ({} when none does, or for team episodes). Each spec's instance is drawn again by a
    fresh env reset with the episode's seed and level (instances are functions of both)."""
    if len(trajs) != len(specs):  # a team env (agentrl.multiagent): a trajectory per agent
        return {}
    scores = []
    for traj, spec in zip(trajs, specs, strict=True):
        env = make_env()
        env.reset(seed=spec.seed, options={"level": spec.level})
        instance = getattr(env, "instance", None)
        expected = getattr(instance, "expected_calls", None)
        close = getattr(env, "close", None)
        if callable(close):
            close()
        if expected is None:
            continue
        steps = call_steps(traj.tool_calls)
        scores.append(decomposition_accuracy(steps, list(expected), instance.prompt))
    return {"call_decomposition_accuracy": sum(scores) / len(scores)} if scores else {}
