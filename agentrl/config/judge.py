"""``reward.judge``: an LLM judge as a reward layer (``agentrl.rewards.judge``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agentrl.config.base import Section

DEFAULT_RUBRIC = (
    "Score 1 if the assistant completed the user's task correctly: it called the tools the "
    "task needed with the right arguments and its final answer states the result the tools "
    "returned. Score 0 if the answer is wrong, missing or made up. Use values in between for "
    "partial work."
)


class JudgeConfig(Section):
    enabled: bool = Field(
        False,
        description="Score each training episode with an LLM judge (a `judge` reward layer); "
        "off: no layer, totals unchanged.",
    )
    base_url: str = Field(
        "http://127.0.0.1:8000/v1",
        description="OpenAI-compatible endpoint of the judge (`agentrl serve`, vLLM, a hosted "
        "API).",
    )
    api_key: str = Field(
        "EMPTY", description="API key sent to the judge endpoint ('EMPTY' for local servers)."
    )
    model: str = Field("", description="Judge model name as the endpoint knows it.")
    mode: Literal["absolute", "relative"] = Field(
        "absolute",
        description="'absolute': one request per episode, a score in [0, 1]; 'relative': one "
        "request per group, the judge scores (or ranks) the group's episodes together (RULER).",
    )
    rubric: str = Field(DEFAULT_RUBRIC, min_length=1, description="What the judge scores.")
    weight: float = Field(0.5, description="Weight of the judge layer in the episode's total.")
    timeout_s: float = Field(30.0, gt=0, description="Seconds per judge request.")
    retries: int = Field(1, ge=0, description="Extra tries after a failed or malformed reply.")
    backoff_s: float = Field(0.5, ge=0, description="Wait before retry k: backoff_s * 2**k.")
    breaker_failures: int = Field(
        5, ge=1, description="Failed requests in a row that open the judge's circuit breaker."
    )
    breaker_cooldown_s: float = Field(
        30.0, ge=0, description="Seconds an open breaker refuses requests (each a judge fault)."
    )
    max_tokens: int = Field(64, ge=1, description="Reply token budget per episode judged.")
    concurrency: int = Field(8, ge=1, description="Judge requests in flight at once.")
    max_transcript_chars: int = Field(
        4000, ge=200, description="Each transcript is cut to this many characters (tail kept)."
    )
    cache_path: str | None = Field(
        None,
        description="JSONL cache of judge scores keyed by hash(model, rubric, mode, transcript); "
        "None = an in-memory cache for the run.",
    )

    @model_validator(mode="after")
    def _needs_a_model(self) -> JudgeConfig:
        if self.enabled and not self.model:
            raise ValueError(
                "reward.judge.enabled=true needs reward.judge.model (the judge's name)"
            )
        return self
