"""Layered, explained rewards (DESIGN contract 4): pure layer functions and a shaper."""

from agentrl.rewards.layers import (
    DEFAULT_WEIGHTS,
    LAYERS,
    PROCESS_LAYERS,
    PROCESS_WEIGHTS,
    argument_coverage,
    call_key,
    completion_score,
    count_repeats,
    format_score,
    normalize_value,
    resolve_weights,
    tool_choice_score,
    turn_argument_score,
)
from agentrl.rewards.shaper import RewardShaper

__all__ = [
    "DEFAULT_WEIGHTS",
    "LAYERS",
    "PROCESS_LAYERS",
    "PROCESS_WEIGHTS",
    "RewardShaper",
    "argument_coverage",
    "call_key",
    "completion_score",
    "count_repeats",
    "format_score",
    "normalize_value",
    "resolve_weights",
    "tool_choice_score",
    "turn_argument_score",
]
