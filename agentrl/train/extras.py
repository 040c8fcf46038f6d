"""Rewards that come after the rollout: the LLM judge's layer (``reward.judge``) on the step's
episodes, and the groups replayed for live human feedback (``train.feedback``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentrl.chat.render import im_end_id, tokenize
from agentrl.config import Config
from agentrl.planning.search_train import episodes_only
from agentrl.rewards.judge import apply_judge, make_judge
from agentrl.train.feedback import FeedbackBook
from agentrl.train.state import LoopState
from agentrl.types import Trajectory


def attach_extras(state: LoopState, cfg: Config, run_dir: Path, tok) -> None:
    """Give the loop state its judge and feedback book (None where they are off)."""
    state.judge = make_judge(cfg.reward.judge)
    if cfg.train.feedback.enabled:
        stop = im_end_id(tok)
        state.feedback = FeedbackBook(run_dir, cfg.train.feedback,
                                      encode=lambda text: tokenize(tok, text) + [stop])  # fmt: skip


def after_rollout(
    state: LoopState, step: int, trajs: list[Trajectory]
) -> tuple[list[Trajectory], dict[str, float]]:
    """The step's trajectories with the judge's layer added, followed by the replayed groups of
    the feedback received since the last update; and their metrics."""
    metrics: dict[str, float] = {}
    episodes = episodes_only(trajs)
    if state.judge is not None:
        metrics.update(apply_judge(state.judge, episodes))
    if state.feedback is None:
        return trajs, metrics
    t0 = time.perf_counter()
    replays, fb_metrics = state.feedback.replays(step)
    state.feedback.remember(step, episodes)
    metrics.update(fb_metrics)
    metrics["time/feedback_s"] = time.perf_counter() - t0
    return trajs + replays, metrics


@contextmanager
def feedback_endpoint(cfg: Config, state: LoopState, run_dir: Path, log) -> Iterator[None]:
    """Serve ``train.feedback``'s HTTP endpoint while the block runs (if a port is set)."""
    fb = cfg.train.feedback
    if state.feedback is None or fb.port is None:
        yield
        return
    from agentrl.train.feedback_server import serve_feedback  # fastapi: the monitor extra

    with serve_feedback(state.feedback, str(run_dir), fb.host, fb.port) as url:
        log(f"feedback: POST {url}/feedback, GET {url}/episodes (files: {run_dir}/feedback)")
        yield
