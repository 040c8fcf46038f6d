"""Scripted trajectories for the task-family tests."""

from __future__ import annotations

from typing import Any

from agentrl.envs.reference import format_call
from agentrl.types import ToolCall


def call(name: str, **arguments: Any) -> str:
    """One tool call as the model would write it."""
    return format_call(ToolCall(name, arguments))


def play(env: Any, actions: list[str], *, instance: Any = None, seed: int = 0, level: int = 1):
    """Reset (on ``instance`` if given) and step through ``actions``; returns the last info."""
    options = {"instance": instance} if instance is not None else {"level": level}
    env.reset(seed=seed, options=options)
    info: dict = {}
    for action in actions:
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return info
