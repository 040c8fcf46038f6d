"""Registers ``meeting_duo`` (import this module, e.g. ``task.imports: [agentrl.multiagent.envs]``).

Team envs live outside ``agentrl.envs.tasks``: their API (one view and one tool set per
agent) is not the single-agent ``Env``'s, so the loops over every built-in env stay as they are.
"""

from __future__ import annotations

from typing import Any

from agentrl.envs.registry import register
from agentrl.multiagent.meeting_duo import MeetingDuoFamily
from agentrl.multiagent.team import TeamEnv


def make_meeting_duo(**kwargs: Any) -> TeamEnv:
    """``TeamEnv(MeetingDuoFamily(), **kwargs)`` (``max_turns`` is per agent)."""
    return TeamEnv(MeetingDuoFamily(), **kwargs)


register("meeting_duo", make_meeting_duo, max_turns=6)
