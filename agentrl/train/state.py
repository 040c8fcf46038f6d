"""What the loop carries from step to step besides models and optimizer, and what a
checkpoint holds: everything ``--resume`` needs to continue exactly (DESIGN contract 6)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.algos.kl import KLController
from agentrl.algos.normalization import RewardNormalizer
from agentrl.algos.update import NanGuard
from agentrl.checkpoint import (
    capture_rng,
    file_position,
    load_trainable_state,
    restore_rng,
    trainable_state,
    truncate_file,
)
from agentrl.train.pipeline import RolloutJob


@dataclass
class LoopState:
    """The loop's RNG, KL controller, reward normalizer, NaN guard, task sampler and the
    asynchronous rollout's in-flight jobs."""

    rng: random.Random
    kl: KLController
    normalizer: RewardNormalizer
    guard: NanGuard
    sampler: Any  # agentrl.train.sampler.Sampler
    eval_before: dict[str, Any] = field(default_factory=dict)
    #: asynchronous rollout: jobs submitted and not yet trained on (agentrl.train.pipeline)
    rollout_jobs: list[RolloutJob] = field(default_factory=list)
    judge: Any = None  # agentrl.rewards.judge.LLMJudge where reward.judge is on
    feedback: Any = None  # agentrl.train.feedback.FeedbackBook where train.feedback is on


def checkpoint_parts(step: int, rl, optimizer, state: LoopState, logs: list[Path]) -> dict:
    """Everything ``--resume`` needs after ``step`` completed steps, by checkpoint file."""
    return {
        "policy": trainable_state(rl.policy),
        "critic": None if rl.critic is None else rl.critic.state_dict(),
        "optimizer": optimizer.state_dict(),
        "state": {
            "step": step,
            "rng": capture_rng(state.rng),
            "kl": state.kl.state_dict(),
            "reward_norm": state.normalizer.state_dict(),
            "nan_guard": state.guard.state_dict(),
            "eval_before": state.eval_before,
            "curriculum": state.sampler.state_dict(),
            "log_positions": {p.name: file_position(p) for p in logs},
        },
        "rollout_jobs": [job.state() for job in state.rollout_jobs],
        "feedback": None if state.feedback is None else state.feedback.state_dict(),
    }


def restore_parts(parts: dict, rl, optimizer, state: LoopState, run_dir: Path) -> int:
    """Load a checkpoint into the models, optimizer and loop state; cut the run's logs back to
    where they were at the checkpoint. Returns the number of completed steps."""
    load_trainable_state(rl.policy, parts["policy"])
    if rl.critic is not None:
        if parts["critic"] is None:
            raise ValueError("checkpoint has no critic but algo.name is 'ppo'")
        rl.critic.load_state_dict(parts["critic"])
    optimizer.load_state_dict(parts["optimizer"])
    saved = parts["state"]
    state.kl.load_state_dict(saved["kl"])
    state.normalizer.load_state_dict(saved["reward_norm"])
    state.guard.load_state_dict(saved["nan_guard"])
    state.eval_before = saved["eval_before"]
    state.sampler.load_state_dict(saved.get("curriculum"))
    state.rollout_jobs[:] = [RolloutJob.from_state(d) for d in parts.get("rollout_jobs", [])]
    if state.feedback is not None:  # pending ratings, files read, rateable episodes
        state.feedback.load_state_dict(parts.get("feedback"))
    for name, size in saved["log_positions"].items():
        truncate_file(Path(run_dir) / name, size)
    restore_rng(saved["rng"], state.rng)
    return int(saved["step"])


def new_state(cfg, kl: KLController, sampler_factory) -> LoopState:
    """A fresh loop state: the loop RNG seeded with ``train.seed``, the sampler drawing from it."""
    rng = random.Random(cfg.train.seed)
    return LoopState(rng, kl, RewardNormalizer(cfg.algo.reward_norm),
                     NanGuard(cfg.train.nan_patience), sampler_factory(cfg, rng))  # fmt: skip
