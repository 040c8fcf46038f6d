"""``train.feedback``: live human feedback during a run (``agentrl.train.feedback``)."""

from __future__ import annotations

from pydantic import Field

from agentrl.config.base import Section


class FeedbackConfig(Section):
    enabled: bool = Field(
        False,
        description="Read ratings and corrections of logged episodes from run_dir/feedback/*.json "
        "(and the HTTP endpoint when port is set); each rated group is replayed in the next "
        "update with a `human` reward layer.",
    )
    port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Serve POST /feedback and GET /episodes on this port while training (0 = a "
        "free port, None = file drop only).",
    )
    host: str = Field("127.0.0.1", description="Address the feedback endpoint binds.")
    weight: float = Field(1.0, gt=0, description="Weight of the human layer (ratings in [-1, 1]).")
    keep_steps: int = Field(
        8, ge=1, description="Steps whose episodes stay replayable (older ratings are dropped)."
    )
