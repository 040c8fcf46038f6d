"""Log-probs and GRPO updates with a LoRA adapter per role (``rollout.hierarchy.adapters:
per_role``, ``agentrl.policy.roles``).

A hierarchical batch has a row per context, each a manager's or a worker's
(``agentrl.algos.hierarchical.row_roles``). Each role's rows are scored and trained with that
role's adapter active: two passes over disjoint rows and disjoint parameters, one optimizer.
The reference (the base with adapters off) is the same for both roles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from agentrl.algos.batch import Batch
from agentrl.algos.forward import reference_logprobs
from agentrl.algos.grpo import grpo_update
from agentrl.algos.hierarchical import row_roles
from agentrl.policy.roles import ROLES, role_adapter
from agentrl.types import Trajectory


def role_rows(is_manager: torch.Tensor) -> list[tuple[str, list[int]]]:
    """(role, its row indices) for each role that has rows; ``is_manager`` (R,) bool."""
    out = []
    for role, mine in zip(ROLES, (is_manager, ~is_manager), strict=True):
        rows = torch.nonzero(mine).flatten().tolist()
        if rows:
            out.append((role, rows))
    return out


def role_logprobs(policy, batch: Batch, is_manager: torch.Tensor, temperature: float):
    """Log-probs (R, T-1) of the batch's targets, each row under its role's adapter."""
    out = torch.zeros_like(batch.old_logp)  # (R, T-1)
    width = batch.input_ids.shape[1]
    for role, rows in role_rows(is_manager):
        with role_adapter(policy, role):
            out[rows] = reference_logprobs(policy, batch.select(rows, width), temperature)
    return out


def logprobs_for(policy, trajs: list[Trajectory], per_role: bool,
                 temperature: float) -> Callable[[Batch], torch.Tensor]:  # fmt: skip
    """``batch -> (R, T-1)`` policy log-probs: one pass, or each role's rows with its adapter."""
    if not per_role:
        return lambda batch: reference_logprobs(policy, batch, temperature)
    is_manager = row_roles(trajs).is_manager  # (R,)
    return lambda batch: role_logprobs(policy, batch, is_manager, temperature)


def role_grpo_update(
    policy,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    advantages: torch.Tensor,  # (R,) per-row advantages
    is_manager: torch.Tensor,  # (R,) bool
    **grpo: Any,
) -> tuple[dict[str, Any], dict[str, float]]:
    """``grpo_update`` on each role's rows with its adapter active; a role whose rows carry no
    policy token (the manager off its time scale) is not updated. Returns (the statistics as
    ``grpo_update`` names them, means over both roles weighted by updates, with ``stepped``
    listing every update of both; each role's own as ``hier/<role>/<name>`` metrics)."""
    width = batch.input_ids.shape[1]
    merged: dict[str, Any] = {"stepped": []}
    per_role: dict[str, float] = {}
    totals: dict[str, float] = {}
    updates = 0.0
    for role, rows in role_rows(is_manager):
        sub = batch.select(rows, width)
        if not sub.rows_with_tokens():
            continue
        with role_adapter(policy, role):
            stats = grpo_update(policy, optimizer, sub, advantages[rows], **grpo)
        merged["stepped"] += stats.pop("stepped")
        n = stats.get("updates", 0.0)
        updates += n
        for k, v in stats.items():
            per_role[f"hier/{role}/{k}"] = v
            if k not in ("updates", "skipped"):
                totals[k] = totals.get(k, 0.0) + v * n
    merged |= {k: v / max(updates, 1.0) for k, v in totals.items()}
    merged["updates"] = updates
    merged["skipped"] = float(len(merged["stepped"]) - updates)
    return merged, per_role
