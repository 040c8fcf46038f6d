"""DPO from trajectories (Rafailov et al., 2023): pure functions and one update.

``algo.name: dpo`` turns each GRPO-style group (``group_size`` episodes of one task instance)
into a preference pair: its highest-reward valid episode is chosen over its lowest-reward one
when they differ by more than ``algo.dpo.min_gap``. An episode's log-probability is the sum
over its policy tokens only (loss mask 1, the ids exactly as played: tool results and prompts
carry no loss), under the policy and under the frozen reference (the weights when RL began;
the base with the adapters off for LoRA). The loss is

    -log sigmoid(beta * ((log pi(c) - log ref(c)) - (log pi(r) - log ref(r))))

averaged over the pairs; ``beta`` (``algo.dpo.beta``) sets how far from the reference the
implicit reward lets the policy go. Harness faults are never in a pair.
"""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.nn.functional as F

from agentrl.algos.batch import Batch
from agentrl.algos.forward import forward_logprobs
from agentrl.algos.update import guarded_step
from agentrl.precision import autocast
from agentrl.types import Trajectory


def dpo_loss(
    chosen: torch.Tensor,  # (P,) policy log-probs of the chosen episodes (sums over tokens)
    rejected: torch.Tensor,  # (P,) policy log-probs of the rejected episodes
    ref_chosen: torch.Tensor,  # (P,) reference log-probs of the chosen episodes
    ref_rejected: torch.Tensor,  # (P,) reference log-probs of the rejected episodes
    beta: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The mean DPO loss over P pairs; stats: the implicit rewards, their margin and how
    often the chosen episode's is the higher."""
    chosen_reward = beta * (chosen - ref_chosen)  # (P,)
    rejected_reward = beta * (rejected - ref_rejected)  # (P,)
    margin = chosen_reward - rejected_reward  # (P,)
    loss = -F.logsigmoid(margin).mean()
    stats = {
        "dpo_margin": float(margin.detach().mean()),
        "dpo_accuracy": float((margin.detach() > 0).float().mean()),
        "dpo_chosen_reward": float(chosen_reward.detach().mean()),
        "dpo_rejected_reward": float(rejected_reward.detach().mean()),
    }
    return loss, stats


def preference_pairs(
    trajs: list[Trajectory], valid: torch.Tensor, min_gap: float = 0.0
) -> list[tuple[int, int]]:
    """(chosen, rejected) episode indices: per group, the best valid episode over the worst
    when their rewards differ by more than ``min_gap`` (ties keep the earlier episode)."""
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(trajs):
        if bool(valid[i]):
            groups.setdefault(t.group_id, []).append(i)
    pairs = []
    for members in groups.values():
        best = max(members, key=lambda i: trajs[i].reward.total)
        worst = min(members, key=lambda i: trajs[i].reward.total)
        if trajs[best].reward.total - trajs[worst].reward.total > min_gap:
            pairs.append((best, worst))
    return pairs


def sequence_logprobs(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # (B,)
    """Sum of the per-token log-probs (B, T) over the policy tokens (mask (B, T))."""
    return (logp * mask.to(logp.dtype)).sum(-1)


def dpo_update(
    policy: Any,
    optimizer: torch.optim.Optimizer,
    batch: Batch,  # one row per episode, with ``ref_logp``
    pairs: list[tuple[int, int]],
    *,
    beta: float,
    epochs: int,
    minibatches: int,
    max_grad_norm: float,
    temperature: float,
    rng: random.Random,
    amp_dtype: torch.dtype | None = None,
) -> dict[str, Any]:
    """``epochs`` passes over the pairs in ``minibatches`` optimizer steps each; mean stats,
    with ``stepped`` (each update's outcome) as the other updates return it."""
    if batch.ref_logp is None:
        raise ValueError("DPO needs the reference log-probs (batch.ref_logp)")
    device = next(policy.parameters()).device
    ref_seq = sequence_logprobs(batch.ref_logp, batch.mask)  # (B,)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    totals: dict[str, float] = {}
    stepped: list[bool] = []
    policy.train()
    for _ in range(epochs if pairs else 0):
        order = list(pairs)
        rng.shuffle(order)
        size = max(1, -(-len(order) // minibatches))
        for s in range(0, len(order), size):
            chunk = order[s : s + size]
            rows = [c for c, _ in chunk] + [r for _, r in chunk]
            mb = batch.select(rows).to(device)
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, amp_dtype):
                seq = sequence_logprobs(forward_logprobs(policy, mb, temperature)[0], mb.mask)
            ref = ref_seq[rows].to(seq.device)
            k = len(chunk)
            loss, stats = dpo_loss(seq[:k].float(), seq[k:].float(), ref[:k], ref[k:], beta)
            finite = bool(torch.isfinite(loss))
            if finite:
                loss.backward()
            grad_norm, ok = guarded_step(params, optimizer, max_grad_norm, finite)
            stepped.append(ok)
            if ok:
                stats |= {"total": float(loss.detach()), "grad_norm": grad_norm}
                for key, v in stats.items():
                    totals[key] = totals.get(key, 0.0) + v
    n_ok = sum(stepped)
    out = {k: v / max(n_ok, 1) for k, v in totals.items()}
    out |= {"updates": float(n_ok), "skipped": float(len(stepped) - n_ok),
            "dpo_pairs": float(len(pairs))}  # fmt: skip
    return out | {"stepped": stepped}
