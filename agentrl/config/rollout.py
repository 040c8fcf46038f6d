"""``rollout:``: how episodes are played (sampling, token budgets, tree search, memory,
constrained tool calls, asynchronous rollout)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agentrl.config.base import Section
from agentrl.config.hierarchy import HierarchyConfig
from agentrl.config.memory import MemoryConfig


class RolloutConfig(Section):
    mode: Literal["react", "plan_execute", "hierarchical"] = Field(
        "react",
        description="react: tool calls from the first turn; plan_execute: a planner turn "
        "writes a numbered plan first, scored against the task's sub-tasks "
        "(agentrl.planning.plan.PlanExecute; reward.plan weighs it); hierarchical: a manager "
        "hands out subgoals, a worker context per subgoal calls the tools "
        "(agentrl.planning.hierarchy; rollout.hierarchy).",
    )
    hierarchy: HierarchyConfig = Field(
        default_factory=HierarchyConfig,
        description="mode=hierarchical: subgoal and turn limits, the two time scales.",
    )
    group_size: int = Field(8, ge=1, description="GRPO: samples per task instance (G).")
    groups_per_step: int = Field(8, ge=1, description="Task instances per RL step.")
    temperature: float = Field(
        0.7,
        gt=0,
        description="Sampling temperature during rollout (0.7: at 1.0 a tiny model warm-started "
        "on a few dozen demonstrations garbles most turns).",
    )
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling (1.0 = off).")
    max_new_tokens: int = Field(96, ge=1, description="Token limit of one assistant turn.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Precision of decoding (rollouts and evaluation). 'auto' = a bf16 copy of "
        "an fp32 policy where bf16 matmuls are native (a CPU with AMX-BF16/AVX512-BF16, a "
        "CUDA GPU), else the policy itself; the update then recomputes the old log-probs "
        "with the policy.",
    )
    max_total_tokens: int = Field(
        1024, ge=32, description="Episode token limit (prompt + all turns); past it: 'length'."
    )
    search_k: int = Field(
        1,
        ge=1,
        description="Tree search in training rollouts: K candidate actions per turn, each played "
        "in a branch from the env's snapshot; the best is kept and every candidate is also "
        "trained against its siblings (a per-turn advantage; agentrl.planning.search_train). "
        "1 = off.",
    )
    search_depth: int = Field(
        1, ge=1, description="Turns each branch is played before it is valued (search_k > 1)."
    )
    memory: MemoryConfig = Field(
        default_factory=MemoryConfig,
        description="Hierarchical episode memory (hot / warm / cold turns); agentrl.memory.",
    )
    constrained: Literal["off", "tool_calls"] = Field(
        "off",
        description="tool_calls: grammar-constrained decoding; once a turn writes <tool_call>, "
        "only a well-formed call of an offered tool can follow (llguidance; "
        "agentrl.engine.grammar). The update recomputes the old log-probs unconstrained.",
    )

    max_staleness: int = Field(
        0,
        ge=0,
        description="Asynchronous rollout: a worker thread plays the next steps' episodes with "
        "a copy of the policy while the trainer updates; a step may train on episodes played "
        "by weights at most this many updates old (agentrl.train.pipeline). 0 = synchronous.",
    )
    is_cap: float = Field(
        2.0,
        ge=1.0,
        description="Asynchronous rollout: stale tokens are weighed by min(pi_prox / mu, "
        "is_cap), the truncated importance weight (agentrl.algos.offpolicy).",
    )

    backend: Literal["local", "ray"] = Field(
        "local",
        description="Where episodes are played: local (this process) or ray (rollout.workers "
        "Ray actors, each with a policy copy and its own envs; agentrl.train.ray_rollout; "
        "pip install 'agentrl[ray]').",
    )
    workers: int = Field(2, ge=1, description="backend=ray: rollout actors.")
    worker_cpus: int = Field(
        1,
        ge=1,
        description="Torch threads of a rollout worker: each Ray actor's (and the CPUs it "
        "reserves), or the asynchronous rollout thread's.",
    )
    ray_address: str | None = Field(
        None,
        description="backend=ray: None starts a local Ray cluster; 'auto' or 'ray://host:port' "
        "joins one started with 'ray start --head'.",
    )

    @model_validator(mode="after")
    def _check_memory(self) -> RolloutConfig:
        if self.memory.enabled and self.search_k > 1:
            raise ValueError(
                "rollout.memory.enabled=true plays episodes with run_episodes; tree search "
                "(rollout.search_k > 1) does not use memory: set search_k=1 or memory off"
            )
        if self.constrained != "off" and self.search_k > 1:
            raise ValueError(
                "rollout.constrained=tool_calls constrains run_episodes; tree search "
                "(rollout.search_k > 1) does not: set search_k=1 or constrained=off"
            )
        if self.pipelined and (self.search_k > 1 or self.constrained != "off"):
            raise ValueError(
                "rollout.max_staleness > 0 (asynchronous rollout) and rollout.backend=ray play "
                "plain episodes: the importance weights would count a tree search's choices or "
                "the tool-call grammar's mask as staleness; set max_staleness=0 and "
                "backend=local, or search_k=1 and constrained=off"
            )
        return self

    @model_validator(mode="after")
    def _check_hierarchical(self) -> RolloutConfig:
        if self.mode == "hierarchical":
            check_hierarchical_rollout(self)
        return self

    @property
    def pipelined(self) -> bool:
        """Whether episodes are played apart from the trainer (``agentrl.train.pipeline``):
        asynchronously, or in Ray actors."""
        return self.max_staleness > 0 or self.backend == "ray"


def check_hierarchical_rollout(ro: RolloutConfig) -> None:
    """``mode: hierarchical`` plays its own manager / worker contexts: the settings that shape
    ``run_episodes`` do not apply to it (a ValueError naming the field)."""
    clashes = {
        "rollout.memory.enabled=true": ro.memory.enabled,
        "rollout.search_k > 1": ro.search_k > 1,
        "rollout.constrained=tool_calls": ro.constrained != "off",
        "rollout.max_staleness > 0": ro.max_staleness > 0,
        "rollout.backend=ray": ro.backend == "ray",
    }
    bad = [name for name, on in clashes.items() if on]
    if bad:
        raise ValueError(
            f"rollout.mode=hierarchical plays manager and worker contexts in one process "
            f"(agentrl.planning.hierarchy); it does not combine with {', '.join(bad)}"
        )
