"""One RL step: settings at the step -> rollout -> rewards -> batch -> advantages -> update.

The rollout is a ``Collector``: ``collector(specs, temperature) -> (trajectories, metrics)``.
The default plays the specs in agentrl's own environments (``env_collector``); ``agentrl train
--agent`` runs an agent program against the trainer's server instead
(``agentrl.train.agent.AgentCollector``). Everything after the rollout is the same path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from agentrl.algos import schedules
from agentrl.algos.batch import TRUNCATED, Batch, episode_validity
from agentrl.algos.dpo import dpo_update, preference_pairs
from agentrl.algos.forward import reference_logprobs
from agentrl.algos.grpo import compute_advantages, grpo_update, without_flat_groups
from agentrl.algos.hierarchical import hierarchical_signals, row_roles
from agentrl.algos.kl import KLController
from agentrl.algos.offpolicy import correct_stale_batch
from agentrl.algos.ppo import ppo_signals, ppo_update
from agentrl.algos.role_adapters import logprobs_for, role_grpo_update
from agentrl.algos.segments import broadcast_to_rows, segment_batch
from agentrl.config import Config
from agentrl.monitor.step import step_metrics
from agentrl.multiagent.central_critic import central_setup, central_value_update
from agentrl.planning.hier_rollout import play_hierarchical
from agentrl.planning.search_train import episodes_only, search_rollout
from agentrl.policy.roles import per_role
from agentrl.precision import autocast
from agentrl.rollout import EpisodeSpec, play_specs
from agentrl.train.build import RLModels
from agentrl.train.extras import after_rollout
from agentrl.train.pipeline import Draw, Played
from agentrl.train.state import LoopState
from agentrl.types import Trajectory

#: ``collector(specs, temperature) -> (trajectories in spec order, rollout metrics)``
Collector = Callable[[list[EpisodeSpec], float], tuple[list[Trajectory], dict]]


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
    a, sch, total = cfg.algo, cfg.algo.schedule, cfg.train.steps
    return StepSettings(
        lr=schedules.learning_rate(step, total, a.lr, sch.lr, sch.warmup_steps, sch.min_lr_ratio),
        kl_coef=kl.value(step),
        entropy_coef=schedules.entropy_coef(step, total, a.entropy_coef, sch.entropy_final),
        gamma=schedules.dynamic_gamma(step, total, a.ppo.gamma_start, a.ppo.gamma),
        temperature=schedules.temperature(
            step, total, cfg.rollout.temperature, sch.temperature_final
        ),
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Apply the step's LR to every group (times the group's ``lr_ratio``)."""
    for g in optimizer.param_groups:
        g["lr"] = lr * g.get("lr_ratio", 1.0)


def episode_kl(batch: Batch) -> torch.Tensor:  # (B,)
    """Per-episode KL to the reference at rollout time: sum of k1 over its policy tokens."""
    if batch.ref_logp is None:
        return torch.zeros(batch.input_ids.shape[0])
    return ((batch.old_logp - batch.ref_logp) * batch.mask).sum(-1)  # (B,)


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


def with_policy_logprobs(policy, batch: Batch, temperature: float,
                         logprobs: Callable[[Batch], torch.Tensor] | None = None,
                         ) -> tuple[Batch, dict]:  # fmt: skip
    """The batch with the policy's own log-probs as the old ones (the rollout decoded a
    lower-precision copy, whose log-probs differ by rounding), and how far apart they were:
    ``rollout/logprob_gap``, the mean |rollout - policy| log-prob over the policy tokens.
    ``logprobs``: how to compute them (default: the policy over every row)."""
    own = (logprobs or (lambda b: reference_logprobs(policy, b, temperature)))(batch)  # (B, T-1)
    tokens = batch.mask > 0
    gap = float((batch.old_logp - own).abs()[tokens].mean()) if tokens.any() else 0.0
    return replace(batch, old_logp=own), {"rollout/logprob_gap": gap}


def _device(model) -> str:
    return str(next(model.parameters()).device)


@dataclass
class StepResult:
    metrics: dict[str, Any]  # a line of metrics.jsonl
    trajs: list[Trajectory]
    stepped: list[bool]  # each optimizer update's outcome (False: skipped, non-finite)
    events: list[str]  # curriculum changes


def rl_step(cfg: Config, step: int, rl: RLModels, optimizer, state: LoopState, generator,
            make_env, pad_id: int, amp, collector: Collector | None = None,
            played: Played | None = None) -> StepResult:  # fmt: skip
    """Play ``groups_per_step x group_size`` episodes and update the policy on them.

    ``collector``: how the episodes are played (default ``env_collector``). ``played``: the
    step's episodes, already played by an asynchronous rollout (``agentrl.train.pipeline``)."""
    ro = cfg.rollout
    t0 = time.time() - (0.0 if played is None else played.wait_s)  # the step's wait included
    s = settings_at(cfg, step, state.kl)
    set_lr(optimizer, s.lr)
    if played is None:
        specs = state.sampler.next(ro.groups_per_step, step * ro.groups_per_step)
        collector = collector or env_collector(generator, make_env, ro)
        trajs, search = collector(specs, s.temperature)
        rollout_s = time.time() - t0
    else:
        trajs, rollout_s, search = played.trajs, played.wait_s, async_metrics(step, played)
    played_n = len(trajs)  # then the groups replayed for human feedback (agentrl.train.extras)
    trajs, judged = after_rollout(state, step, trajs)
    played_valid = valid = episode_validity(trajs, resolve_truncation(cfg))  # (N,)
    raw = torch.tensor([t.reward.total for t in trajs], dtype=torch.float32)  # (N,)
    rewards = state.normalizer(raw, valid)  # (N,)
    stale = played is not None or len(trajs) > played_n  # proximal ratio, IS weights
    played_trajs, flat = trajs, {}
    if cfg.algo.grpo.skip_flat_groups:  # from here on, only the groups with a signal
        trajs, valid, rewards, flat = without_flat_groups(trajs, valid, rewards)
    if not trajs:  # every group flat: no update, the step is still recorded
        return record_step(step, state, played_trajs[:played_n], played_valid, s, [],
                           {"updates": 0.0, "skipped": 0.0}, search | judged | flat,
                           rollout_s, t0)  # fmt: skip
    batch, owner = segment_batch(trajs, valid, pad_id)  # a row per context: R >= N rows
    extra_rollout: dict[str, float] = {}
    own = logprobs_for(rl.policy, trajs, per_role(cfg), s.temperature)  # batch -> (R, T-1)
    with autocast(_device(rl.policy), amp):
        if stale:
            batch, extra_rollout = correct_stale_batch(batch, own(batch), ro.is_cap)
        elif not getattr(generator, "decodes_own_weights", True) or ro.constrained != "off":
            batch, extra_rollout = with_policy_logprobs(rl.policy, batch, s.temperature, own)
        if rl.ref is not None:
            batch = batch.with_reference(reference_logprobs(rl.ref, batch, s.temperature))
    kl_per_episode = torch.zeros(len(trajs)).index_add_(0, owner, episode_kl(batch))  # (N,)
    stats, extra = update_policy(cfg, s, rl, optimizer, batch, trajs, rewards, valid,
                                 kl_per_episode, state.rng, amp, owner, step=step)  # fmt: skip
    stepped = stats.pop("stepped")
    state.kl.update(float(kl_per_episode[valid].mean()) if valid.any() else 0.0, len(trajs))
    extras = search | judged | flat | extra | extra_rollout
    extras["rollout/kl_per_episode"] = float(kl_per_episode.mean())
    return record_step(step, state, played_trajs[:played_n], played_valid, s, stepped, stats,
                       extras, rollout_s, t0)  # fmt: skip


def record_step(step: int, state: LoopState, played: list[Trajectory], valid: torch.Tensor,
                s: StepSettings, stepped: list[bool], stats: dict[str, Any],
                extras: dict[str, float], rollout_s: float, t0: float) -> StepResult:  # fmt: skip
    """The step's result: metrics of the episodes played (search siblings and feedback
    replays are trained, not counted), the update's ``stats``, ``extras`` and the scheduled
    settings; then the sampler (curriculum) moves on those episodes."""
    episodes = episodes_only(played)
    m = step_metrics(step, episodes, valid[: len(episodes)], stats, rollout_s, time.time() - t0)
    m.update(extras)
    m.update({f"train/{k}": v for k, v in vars(s).items()})
    events = state.sampler.update(episodes)
    m.update(state.sampler.metrics())
    return StepResult(m, episodes, stepped, events)


def draw_for(cfg: Config, state: LoopState) -> Draw:
    """An asynchronous rollout's ``draw``: step j's task instances from the sampler, and its
    scheduled temperature (the same ones a synchronous step j would use)."""
    ro, sch = cfg.rollout, cfg.algo.schedule

    def draw(j: int) -> tuple[list[EpisodeSpec], float]:
        specs = state.sampler.next(ro.groups_per_step, j * ro.groups_per_step)
        temperature = schedules.temperature(
            j, cfg.train.steps, ro.temperature, sch.temperature_final
        )
        return specs, temperature

    return draw


def async_metrics(step: int, played: Played) -> dict[str, float]:
    """How stale an asynchronous step's episodes were and how long the worker played them."""
    return {"rollout/staleness": float(step - played.version),
            "rollout/worker_restarts": float(played.restarts),
            "time/rollout_play_s": played.play_s}  # fmt: skip


def env_collector(generator, make_env, ro) -> Collector:
    """The default rollout: the specs played in agentrl's environments (``collect``)."""
    return lambda specs, temperature: collect(generator, make_env, specs, ro, temperature)


def collect(generator, make_env, specs, ro, temperature: float) -> tuple[list[Trajectory], dict]:
    """The step's trajectories: plain episodes, or with ``rollout.search_k`` > 1 episodes
    played with tree search followed by their candidate siblings; and search metrics."""
    if ro.mode == "hierarchical":  # manager and worker contexts (agentrl.planning.hierarchy)
        return play_hierarchical(generator, make_env, specs, ro, temperature), {}
    if ro.search_k == 1:
        return play_specs(generator, make_env, specs, ro, temperature), {}
    trajs, cost = search_rollout(generator, make_env, specs, k=ro.search_k,
                                 depth=ro.search_depth, temperature=temperature, top_p=ro.top_p,
                                 max_new_tokens=ro.max_new_tokens,
                                 max_total_tokens=ro.max_total_tokens)  # fmt: skip
    return trajs, {"rollout/search_branches": cost.branches,
                   "rollout/search_branch_tokens": cost.branch_tokens,
                   "rollout/search_siblings": len(trajs) - len(specs)}  # fmt: skip


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
    rng,
    amp_dtype: torch.dtype | None,
    episode_of_row: torch.Tensor | None = None,  # (R,) each batch row's episode (segments)
    step: int = 0,  # the RL step (the hierarchical manager's time scale)
) -> tuple[dict[str, Any], dict[str, float]]:
    """Advantages and optimizer updates of one RL step, GRPO, PPO or DPO: (update stats, extras).

    ``batch`` has a row per context: an episode played in several (``Trajectory.segments``)
    has one per segment, each trained with the episode's advantage (``episode_of_row``)."""
    segmented = episode_of_row is not None and len(episode_of_row) != len(trajs)
    if segmented and cfg.algo.name in ("ppo", "dpo"):
        raise ValueError(
            f"algo.name: {cfg.algo.name} does not train episodes played in several contexts "
            "(memory, or an agent program that rewrote its history); use grpo"
        )
    a = cfg.algo
    if a.name == "dpo":
        pairs = preference_pairs(trajs, valid, a.dpo.min_gap)
        return dpo_update(rl.policy, optimizer, batch, pairs, beta=a.dpo.beta, epochs=a.epochs,
                          minibatches=a.minibatches, max_grad_norm=a.max_grad_norm,
                          temperature=s.temperature, rng=rng, amp_dtype=amp_dtype), {}  # fmt: skip
    common: dict[str, Any] = dict(
        clip_eps=a.clip_eps, loss_agg=a.loss_agg, epochs=a.epochs, minibatches=a.minibatches,
        max_grad_norm=a.max_grad_norm, temperature=s.temperature, rng=rng,
        entropy_coef=s.entropy_coef, grad_accum=a.grad_accum, token_budget=a.micro_batch_tokens,
        amp_dtype=amp_dtype, kl_kind=a.kl.estimator, moe_aux_coef=a.moe_aux_coef,
        kl_max=a.kl.max_per_token,
    )  # fmt: skip
    truncation = resolve_truncation(cfg)
    if a.name == "ppo":
        return _ppo(cfg, s, rl, optimizer, batch, trajs, rewards, valid, truncation, common)
    if a.kl.mode == "reward":
        rewards = rewards - s.kl_coef * kl_per_episode  # (N,)
    advantages, _ = compute_advantages(
        trajs, truncation, a.grpo.scale_rewards, a.grpo.advantage, rewards
    )  # (N,)
    extra = {}
    if cfg.rollout.mode == "hierarchical":  # manager and worker rows, two time scales
        owner = torch.arange(len(trajs)) if episode_of_row is None else episode_of_row
        batch, advantages, extra = hierarchical_signals(
            trajs, batch, advantages, owner, valid, step, cfg.rollout.hierarchy,
            a.grpo.scale_rewards)  # fmt: skip
    elif segmented:
        advantages = broadcast_to_rows(advantages, episode_of_row)  # (R,)
    kl_loss = s.kl_coef if a.kl.mode == "loss" else 0.0
    if per_role(cfg):  # a LoRA adapter per role: each role's rows with its own
        is_manager = row_roles(trajs).is_manager  # (R,)
        stats, by_role = role_grpo_update(rl.policy, optimizer, batch, advantages, is_manager,
                                          kl_coef=kl_loss, **common)  # fmt: skip
        return stats, extra | by_role
    return grpo_update(rl.policy, optimizer, batch, advantages, kl_coef=kl_loss, **common), extra


def _ppo(cfg: Config, s: StepSettings, rl: RLModels, optimizer: torch.optim.Optimizer,
         batch: Batch, trajs: list[Trajectory], rewards: torch.Tensor, valid: torch.Tensor,
         truncation: str, common: dict[str, Any]) -> tuple[dict[str, Any], dict]:  # fmt: skip
    """PPO's signals and updates; with ``algo.ppo.critic: central`` the critic values the
    team's joint views and trains on them after the policy update (``agentrl.multiagent``)."""
    a, p = cfg.algo, cfg.algo.ppo
    bootstrap = torch.tensor(
        [truncation == "bootstrap" and t.termination in TRUNCATED for t in trajs]
    )  # (N,)
    central = p.critic == "central"
    views, values = central_setup(rl.critic, trajs, batch) if central else (None, None)
    signals, extra = ppo_signals(
        rl.policy, rl.critic, batch, trajs, rewards, valid, bootstrap, gamma=s.gamma,
        lam=p.lam, level=p.gae_level, kl_coef=s.kl_coef, kl_mode=a.kl.mode,
        whiten_advantages=p.whiten_advantages, values=values,
    )  # fmt: skip
    stats = ppo_update(
        rl.policy, rl.critic, optimizer, batch, signals, value_clip=p.value_clip,
        vf_coef=0.0 if central else p.vf_coef, kl_coef=s.kl_coef,
        kl_in_loss=a.kl.mode == "loss", target_kl=p.target_kl, **common,
    )  # fmt: skip
    if central:
        stats |= central_value_update(
            rl.critic, optimizer, views, signals.old_values, signals.returns, signals.value_mask,
            pad_id=0, value_clip=p.value_clip, epochs=a.epochs,
            batch_views=max(1, len(views) // a.minibatches), max_grad_norm=a.max_grad_norm,
            rng=common["rng"],
        )  # fmt: skip
    return stats, extra
