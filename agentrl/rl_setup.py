"""Helpers of the training loop: the models RL needs, the optimizer, per-step settings, and
the run state that goes into a checkpoint. ``trainer.train`` reads top to bottom using these.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.algos import schedules
from agentrl.algos.grpo import Batch, compute_advantages, grpo_update
from agentrl.algos.kl import KLController
from agentrl.algos.normalization import RewardNormalizer
from agentrl.algos.ppo import ppo_update, prepare_ppo_batch
from agentrl.algos.update import NanGuard
from agentrl.algos.value import Critic, make_critic
from agentrl.checkpoint import (
    capture_rng,
    file_position,
    load_trainable_state,
    restore_rng,
    trainable_state,
    truncate_file,
)
from agentrl.config import Config
from agentrl.curriculum import Curriculum
from agentrl.types import Trajectory


@dataclass
class RLModels:
    """The policy being trained (maybe a peft model), its reference and its critic."""

    policy: Any
    ref: Any | None  # frozen reference policy (None when no KL is used)
    critic: Critic | None  # PPO only
    lora: bool = False


def build_rl_models(model: Any, cfg: Config) -> RLModels:
    """Reference, critic, gradient checkpointing and LoRA around ``model`` (at RL start)."""
    from agentrl.policy.lora import AdapterDisabled, apply_lora

    a, lo = cfg.algo, cfg.lora
    needs_ref = a.kl_coef > 0
    critic = make_critic(model, a.critic) if a.name == "ppo" else None
    if cfg.train.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if critic is not None and critic.separate:
            critic.backbone.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
    if lo.enabled:
        model = apply_lora(
            model,
            rank=lo.rank,
            alpha=lo.alpha,
            dropout=lo.dropout,
            target_modules=lo.target_modules,
        )
        ref = AdapterDisabled(model) if needs_ref else None  # the frozen base, no copy
        return RLModels(model, ref, critic, lora=True)
    ref = None
    if needs_ref:
        ref = copy.deepcopy(model).eval()
        ref.requires_grad_(False)
    return RLModels(model, ref, critic)


def build_optimizer(rl: RLModels, cfg: Config) -> torch.optim.AdamW:
    """AdamW over the trainable policy parameters (and the critic's, as a second group).

    Each group carries ``lr_ratio``: its LR is the schedule's LR times this ratio (LoRA:
    ``lora.lr_scale``; critic: ``algo.value_lr / algo.lr``).
    """
    ratio = cfg.lora.lr_scale if rl.lora else 1.0
    groups = [{"params": [p for p in rl.policy.parameters() if p.requires_grad], "lr_ratio": ratio}]
    if rl.critic is not None:
        value_ratio = (cfg.algo.value_lr / cfg.algo.lr) if cfg.algo.value_lr else ratio
        groups.append({"params": list(rl.critic.parameters()), "lr_ratio": value_ratio})
    for g in groups:
        g["lr"] = cfg.algo.lr * g["lr_ratio"]
    return torch.optim.AdamW(groups, lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay)


@dataclass(frozen=True)
class StepSettings:
    """Scheduled values of one RL step."""

    lr: float
    kl_coef: float
    entropy_coef: float
    gamma: float
    temperature: float


def settings_at(cfg: Config, step: int, kl: KLController) -> StepSettings:
    """Every schedule evaluated at ``step`` (pure functions of the step, plus the KL controller)."""
    a, total = cfg.algo, cfg.train.steps
    return StepSettings(
        lr=schedules.learning_rate(
            step, total, a.lr, a.lr_schedule, a.warmup_steps, a.min_lr_ratio
        ),
        kl_coef=kl.value(step),
        entropy_coef=schedules.entropy_coef(step, total, a.entropy_coef, a.entropy_coef_final),
        gamma=schedules.dynamic_gamma(step, total, a.gamma_start, a.gamma),
        temperature=schedules.temperature(
            step, total, cfg.rollout.temperature, a.temperature_final
        ),
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Apply the step's LR to every group (times the group's ``lr_ratio``)."""
    for g in optimizer.param_groups:
        g["lr"] = lr * g.get("lr_ratio", 1.0)


def make_kl_controller(cfg: Config) -> KLController:
    a = cfg.algo
    return KLController(
        a.kl_control,
        a.kl_coef,
        target=a.kl_target,
        horizon=a.kl_horizon,
        decay_rate=a.kl_decay_rate,
        decay_every=a.kl_decay_every,
    )


def episode_kl(batch: Batch) -> torch.Tensor:  # (B,)
    """Per-episode KL to the reference at rollout time: sum of k1 over its policy tokens."""
    if batch.ref_logp is None:
        return torch.zeros(batch.input_ids.shape[0])
    return ((batch.old_logp - batch.ref_logp) * batch.mask).sum(-1)  # (B,)


@dataclass
class LoopState:
    """What the loop carries from step to step besides the models and the optimizer."""

    rng: random.Random
    kl: KLController
    normalizer: RewardNormalizer
    guard: NanGuard
    eval_before: dict[str, Any]
    curriculum: Curriculum | None = None  # dynamic difficulty (cfg.curriculum.enabled)


def checkpoint_parts(
    step: int, rl: RLModels, optimizer, loop: LoopState, logs: list[Path]
) -> dict[str, Any]:
    """Everything ``--resume`` needs after ``step`` completed steps, by checkpoint file."""
    return {
        "policy": trainable_state(rl.policy),
        "critic": None if rl.critic is None else rl.critic.state_dict(),
        "optimizer": optimizer.state_dict(),
        "state": {
            "step": step,
            "rng": capture_rng(loop.rng),
            "kl": loop.kl.state_dict(),
            "reward_norm": loop.normalizer.state_dict(),
            "nan_guard": loop.guard.state_dict(),
            "eval_before": loop.eval_before,
            "curriculum": None if loop.curriculum is None else loop.curriculum.state_dict(),
            "log_positions": {p.name: file_position(p) for p in logs},
        },
    }


def restore_parts(
    parts: dict[str, Any], rl: RLModels, optimizer, loop: LoopState, run_dir: Path
) -> int:
    """Load a checkpoint into the models, optimizer and loop state; cut the run's logs back to
    where they were at the checkpoint. Returns the number of completed steps."""
    load_trainable_state(rl.policy, parts["policy"])
    if rl.critic is not None:
        if parts["critic"] is None:
            raise ValueError("checkpoint has no critic but algo.name is 'ppo'")
        rl.critic.load_state_dict(parts["critic"])
    optimizer.load_state_dict(parts["optimizer"])
    state = parts["state"]
    loop.kl.load_state_dict(state["kl"])
    loop.normalizer.load_state_dict(state["reward_norm"])
    loop.guard.load_state_dict(state["nan_guard"])
    loop.eval_before = state["eval_before"]
    if loop.curriculum is not None and state.get("curriculum") is not None:
        loop.curriculum.load_state_dict(state["curriculum"])
    for name, size in state["log_positions"].items():
        truncate_file(Path(run_dir) / name, size)
    restore_rng(state["rng"], loop.rng)
    return int(state["step"])


TRUNCATED = ("max_turns", "length")


def resolve_truncation(cfg: Config) -> str:
    """``algo.truncation`` with ``auto`` resolved: ``zero`` (truncated episodes scored) for
    GRPO and PPO alike.

    An agent that loops on tool calls until ``max_turns`` or rambles past the token budget has
    failed. Masking those episodes (as overlong filtering does for single-turn reasoning) left
    GRPO free to drift into them: on the weather demo, masked truncations grew from 3% to 64%
    of the rollouts in 14 steps. Bootstrapping them from the value (the textbook rule for a
    time limit) did the same to PPO: 30 steps from the same warm start ended with 58 of 96
    held-out episodes looping to ``max_turns`` and success 0.198, against 0 and 0.250 when
    scored. ``bootstrap`` stays available for tasks whose cut-off is arbitrary.
    """
    if cfg.algo.truncation != "auto":
        return cfg.algo.truncation
    return "zero"


def update_policy(
    cfg: Config,
    s: StepSettings,
    rl: RLModels,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    trajs: list[Trajectory],
    rewards: torch.Tensor,  # (N,) normalized episode rewards
    valid: torch.Tensor,  # (N,) bool
    kl_per_episode: torch.Tensor,  # (N,) rollout-time KL to the reference
    rng: random.Random,
    amp_dtype: torch.dtype | None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Advantages and optimizer updates of one RL step, GRPO or PPO: (update stats, extras)."""
    algo = cfg.algo
    common: dict[str, Any] = {
        "clip_eps": algo.clip_eps,
        "loss_agg": algo.loss_agg,
        "epochs": algo.epochs,
        "minibatches": algo.minibatches,
        "max_grad_norm": algo.max_grad_norm,
        "temperature": s.temperature,
        "rng": rng,
        "entropy_coef": s.entropy_coef,
        "grad_accum": algo.grad_accum,
        "token_budget": algo.micro_batch_tokens,
        "amp_dtype": amp_dtype,
        "kl_kind": algo.kl_estimator,
    }
    truncation = resolve_truncation(cfg)
    if algo.name == "ppo":
        bootstrap = torch.tensor(
            [truncation == "bootstrap" and t.termination in TRUNCATED for t in trajs]
        )  # (N,)
        batch, extra = prepare_ppo_batch(
            rl.policy,
            rl.critic,
            batch,
            trajs,
            rewards,
            valid,
            bootstrap,
            gamma=s.gamma,
            lam=algo.lam,
            level=algo.gae_level,
            kl_coef=s.kl_coef,
            kl_mode=algo.kl_mode,
            whiten_advantages=algo.whiten_advantages,
        )
        stats = ppo_update(
            rl.policy,
            rl.critic,
            optimizer,
            batch,
            value_clip=algo.value_clip,
            vf_coef=algo.vf_coef,
            kl_coef=s.kl_coef,
            kl_in_loss=algo.kl_mode == "loss",
            target_kl=algo.target_kl,
            **common,
        )
        return stats, extra
    if algo.kl_mode == "reward":
        rewards = rewards - s.kl_coef * kl_per_episode  # (N,)
    batch.advantages, _ = compute_advantages(
        trajs, truncation, algo.scale_rewards, algo.advantage, rewards
    )
    kl_loss = s.kl_coef if algo.kl_mode == "loss" else 0.0
    return grpo_update(rl.policy, optimizer, batch, kl_coef=kl_loss, **common), {}
