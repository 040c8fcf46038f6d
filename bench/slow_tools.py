"""A ``task.imports`` plugin for bench/async.py: weather whose tool calls take time.

``weather_slow_tools`` (``task.env_kwargs: {latency: 0.2}``): every tool call sleeps
``latency`` seconds after the env steps (a web API's round trip), in whichever process plays
the episode (this one, the asynchronous rollout's thread, or a Ray actor).
"""

from __future__ import annotations

import time
from typing import Any

from agentrl.envs import make, register


class ToolLatency:
    """An env whose every tool call takes ``seconds`` longer (a sleep after its step)."""

    def __init__(self, env: Any, seconds: float) -> None:
        self.env, self.seconds = env, seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def step(self, action_text: str):
        out = self.env.step(action_text)
        time.sleep(self.seconds * len(out[4].get("tool_calls", [])))
        return out


def _make(latency: float = 0.2, **kw: Any) -> ToolLatency:
    return ToolLatency(make("weather", **kw), latency)


register("weather_slow_tools", _make)
