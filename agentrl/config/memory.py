"""``rollout.memory``: hierarchical episode memory (``agentrl.memory``) for long episodes."""

from __future__ import annotations

from pydantic import Field

from agentrl.config.base import Section


class MemoryConfig(Section):
    enabled: bool = Field(
        False,
        description="Play episodes with hierarchical memory: the prompt holds the task, a memory "
        "note (warm records and recalled cold turns) and the last hot_turns turns verbatim; an "
        "episode becomes several token-exact segments trained with the episode's advantage.",
    )
    hot_turns: int = Field(3, ge=1, description="Most recent turns kept verbatim in the prompt.")
    warm_turns: int = Field(
        7,
        ge=0,
        description="Turns before the hot ones kept as one-line records (task type, tool-call "
        "result with its key values, state); older turns go to the cold store.",
    )
    budget_tokens: int = Field(
        160,
        ge=16,
        description="Token budget of the memory note (warm lines and recalled turns), counted "
        "with the policy's tokenizer.",
    )
    cold_top_k: int = Field(
        2, ge=0, description="Cold turns recalled per prompt by MinHash LSH against the state."
    )
    rewrite_every: int = Field(
        1,
        ge=1,
        description="Turns between prompt rewrites once past hot_turns. In between, turns are "
        "appended as deltas (the segment keeps its KV cache), so the verbatim window holds "
        "hot_turns to hot_turns + rewrite_every - 1 turns. 1 = rewrite every turn.",
    )
    num_perm: int = Field(
        64, ge=8, le=512, description="MinHash permutations of the cold store's signatures."
    )
