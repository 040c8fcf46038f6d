"""``rollout.hierarchy``: hierarchical RL (``rollout.mode: hierarchical``,
``agentrl.planning.hierarchy``).

A manager context picks subgoals, a worker context per subgoal carries it out with tool calls;
both are the same policy with role prompts, or (``adapters: per_role``, with LoRA) two LoRA
adapters on one frozen base, one per role. The manager trains on the episode's reward, each
worker segment on its subgoal's reward, at two time scales (``manager_every``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentrl.config.base import Section


class HierarchyConfig(Section):
    max_subgoals: int = Field(
        4,
        ge=1,
        description="Subgoals the manager may hand out per episode; asking for one more ends the "
        "episode as max_turns.",
    )
    worker_turns: int = Field(
        4,
        ge=1,
        description="Turns a worker gets per subgoal (tool calls and its 'subgoal done' reply); "
        "past it the subgoal returns to the manager unfinished.",
    )
    pass_results: bool = Field(
        False,
        description="Also give each worker the results of the earlier subgoals (under 'Known:'); "
        "off: a worker sees only its subgoal line (whatever the manager wrote into it).",
    )
    manager_every: int = Field(
        2,
        ge=1,
        description="Two time scales: the manager's contexts train on steps where step % "
        "manager_every == 0 (on the other steps their rows are left out of the loss); the "
        "workers train every step.",
    )
    manager_weight: float = Field(
        1.0, ge=0, description="Scale of the manager rows' advantages on the steps they train."
    )
    worker_weight: float = Field(1.0, ge=0, description="Scale of the worker rows' advantages.")
    adapters: Literal["shared", "per_role"] = Field(
        "shared",
        description="shared: manager and worker are one policy (role prompts only); per_role: "
        "each role has its own LoRA adapter on one frozen base (needs lora.enabled=true): "
        "manager contexts decode and train with the manager's, worker contexts with the "
        "worker's (agentrl.policy.roles).",
    )
    worker_baseline: Literal["type", "group"] = Field(
        "type",
        description="Baseline of a worker segment's subgoal reward: type = the step's worker "
        "segments with the same subgoal type (the tool of the needed call it names, 'other' when "
        "it names none); group = the worker segments of its GRPO group.",
    )
