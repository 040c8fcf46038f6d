"""GRPO and the critic-free estimators: group advantages per episode, a clipped-ratio loss
with KL to the reference per micro-batch; ``run_updates`` does the rest."""

from __future__ import annotations

import random
from typing import Any

import torch

from agentrl.algos.advantages import (
    group_advantages,
    informative_episodes,
    reinforce_pp_advantages,
    rloo_advantages,
)
from agentrl.algos.batch import Batch, Signals, episode_validity
from agentrl.algos.forward import forward_logprobs
from agentrl.algos.losses import grpo_loss, masked_mean
from agentrl.algos.moe import add_aux_loss, capturing, router_capture
from agentrl.algos.update import MicroLoss, run_updates
from agentrl.types import Trajectory

ESTIMATORS = ("grpo", "rloo", "reinforce_pp")


def compute_advantages(
    trajs: list[Trajectory],
    truncation: str,
    scale: bool,
    estimator: str = "grpo",
    rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Critic-free advantages (N,) and validity (N,) for a list of grouped trajectories.

    ``estimator``: ``grpo`` (group-centred, std-scaled if ``scale``), ``rloo`` (leave-one-out
    group mean) or ``reinforce_pp`` (group-centred, batch-std scaled). ``rewards`` (N,)
    replaces the episodes' own totals (e.g. normalized ones). Only ``truncation='mask'`` drops
    truncated episodes (``auto`` is resolved by ``agentrl.train.step.resolve_truncation``).
    """
    if rewards is None:
        rewards = torch.tensor([t.reward.total for t in trajs], dtype=torch.float32)  # (N,)
    groups = group_keys(trajs)  # (N,)
    valid = episode_validity(trajs, truncation)
    if estimator == "grpo":
        return group_advantages(rewards, groups, valid, scale=scale), valid
    if estimator == "rloo":
        return rloo_advantages(rewards, groups, valid), valid
    if estimator == "reinforce_pp":
        return reinforce_pp_advantages(rewards, groups, valid), valid
    raise ValueError(
        f"config field 'algo.grpo.advantage' must be one of {ESTIMATORS}, got {estimator!r}"
    )


def group_keys(trajs: list[Trajectory]) -> torch.Tensor:  # (N,)
    """Each episode's baseline group: its ``group_id`` (one task instance), split by agent
    role for a team's trajectories (``info["agent_index"]``, ``agentrl.multiagent``), so each
    role is compared with the same role's other plays of the instance."""
    keys: dict[tuple[int, int], int] = {}
    return torch.tensor([keys.setdefault((t.group_id, int(t.info.get("agent_index", 0))),
                                         len(keys)) for t in trajs], dtype=torch.long)  # fmt: skip


def without_flat_groups(
    trajs: list[Trajectory],
    valid: torch.Tensor,  # (N,) bool
    rewards: torch.Tensor,  # (N,) the rewards the advantages are computed from
) -> tuple[list[Trajectory], torch.Tensor, torch.Tensor, dict[str, float]]:
    """``trajs``, ``valid`` and ``rewards`` restricted to the groups whose rewards differ
    (``informative_episodes``), and what was left out: ``update/flat_groups`` (groups
    dropped), ``update/trained_fraction`` (share of the trajectories kept)."""
    groups = group_keys(trajs)  # (N,)
    keep = informative_episodes(rewards, groups, valid)  # (N,)
    kept = [t for t, k in zip(trajs, keep.tolist(), strict=True) if k]
    dropped = len(torch.unique(groups[~keep]))  # 0 for an empty selection
    stats = {"update/flat_groups": float(dropped),
             "update/trained_fraction": len(kept) / max(len(trajs), 1)}  # fmt: skip
    return kept, valid[keep], rewards[keep], stats


def grpo_micro_loss(
    model,
    *,
    clip_eps: float,
    kl_coef: float,
    loss_agg: str,
    temperature: float,
    entropy_coef: float = 0.0,
    kl_kind: str = "k3",
    moe_aux_coef: float = 0.0,
    kl_max: float | None = None,
) -> MicroLoss:
    """The GRPO loss of one micro-batch: clipped surrogate + KL - entropy bonus, weighted;
    for a Mixture-of-Experts model + ``moe_aux_coef`` x router load balancing (``algos.moe``)."""
    routers = router_capture(model)  # None for a dense model

    def micro_loss(mb: Batch, sig: Signals, share: float, _value_share: float):
        with capturing(routers):
            logp, ent = forward_logprobs(
                model, mb, temperature, with_entropy=True, entropy_grad=entropy_coef > 0
            )  # (b, t-1) each
        loss, stats = grpo_loss(
            logp, mb.old_logp, mb.ref_logp, sig.advantages, mb.mask, clip_eps, kl_coef,
            loss_agg, kl_kind, mb.is_weight, kl_max,
        )  # fmt: skip
        entropy = masked_mean(ent, mb.mask, loss_agg)
        if entropy_coef > 0:
            loss = loss - entropy_coef * entropy
        loss, moe_stats = add_aux_loss(routers, mb, loss, moe_aux_coef)
        stats = {**stats, **moe_stats, "total": loss.detach(), "entropy": entropy.detach()}
        return loss * share, {k: share * float(v) for k, v in stats.items()}

    return micro_loss


def grpo_update(
    model,
    optimizer,
    batch: Batch,
    advantages: torch.Tensor,  # (B,) per-episode advantages
    *,
    clip_eps: float,
    kl_coef: float,
    loss_agg: str,
    epochs: int,
    minibatches: int,
    max_grad_norm: float,
    temperature: float,
    rng: random.Random,
    entropy_coef: float = 0.0,
    grad_accum: int = 1,
    token_budget: int = 0,
    amp_dtype: torch.dtype | None = None,
    kl_kind: str = "k3",
    moe_aux_coef: float = 0.0,
    kl_max: float | None = None,
) -> dict[str, Any]:
    """Epochs x minibatches GRPO optimizer steps on one rollout batch (``run_updates``)."""
    loss = grpo_micro_loss(
        model, clip_eps=clip_eps, kl_coef=kl_coef, loss_agg=loss_agg, temperature=temperature,
        entropy_coef=entropy_coef, kl_kind=kl_kind, moe_aux_coef=moe_aux_coef, kl_max=kl_max,
    )  # fmt: skip
    return run_updates(
        model, optimizer, batch, Signals(advantages), loss, epochs=epochs,
        minibatches=minibatches, max_grad_norm=max_grad_norm, rng=rng, loss_agg=loss_agg,
        grad_accum=grad_accum, token_budget=token_budget, amp_dtype=amp_dtype,
    )  # fmt: skip
