"""Credit at two time scales for hierarchical episodes (``rollout.mode: hierarchical``).

A hierarchical episode is trained as token-exact segments (``agentrl.algos.segments``): its
worker contexts, then its manager context. Each level has its own reward and baseline:

- manager rows: the episode's (shaped, normalized) reward, GRPO over the episode's group,
  i.e. the episode advantage ``A_n`` as any episode gets it;
- worker rows: the subgoal's reward ``r_w`` (``agentrl.planning.subgoals.subgoal_reward``),
  centred (and std-scaled like GRPO) over the step's worker segments of the same subgoal type
  (``worker_baseline: type``) or of the same GRPO group (``group``).

Two time scales inside the one GRPO update: the manager's rows train on steps with ``step %
manager_every == 0`` only; on the other steps their advantage is 0 and their loss mask is
cleared, so the manager's tokens get no gradient at all (not even the KL term) while the
workers train every step. ``manager_weight`` and ``worker_weight`` scale each level's
advantages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from agentrl.algos.advantages import group_advantages
from agentrl.algos.batch import Batch
from agentrl.types import Trajectory


@dataclass(frozen=True)
class RowRoles:
    """Per batch row (``segment_rows`` order): which level and, for workers, what reward."""

    is_manager: torch.Tensor  # (R,) bool
    worker_reward: torch.Tensor  # (R,) subgoal reward (0 on manager rows)
    worker_key: torch.Tensor  # (R,) long: the worker's baseline key (-1 on manager rows)
    keys: tuple[str, ...]  # the baseline keys' names, by index


def row_roles(trajs: list[Trajectory], baseline: str = "type") -> RowRoles:
    """The roles of every segment row of ``trajs`` (``info["hierarchy"]``, one entry per
    segment). A trajectory without one (played some other way) is a single manager row per
    context. ``baseline``: ``type`` keys workers by subgoal type, ``group`` by GRPO group."""
    is_manager, reward, key_names = [], [], []
    for t in trajs:
        roles = t.info.get("hierarchy") or [{"role": "manager"}] * len(t.contexts())
        if len(roles) != len(t.contexts()):
            raise ValueError(f"episode {t.task_id}: {len(roles)} hierarchy entries for "
                             f"{len(t.contexts())} segments")  # fmt: skip
        for r in roles:
            manager = r["role"] == "manager"
            is_manager.append(manager)
            reward.append(0.0 if manager else float(r["reward"]))
            key = r.get("type", "other") if baseline == "type" else f"group {t.group_id}"
            key_names.append(None if manager else key)
    keys = tuple(dict.fromkeys(k for k in key_names if k is not None))
    index = [-1 if k is None else keys.index(k) for k in key_names]
    return RowRoles(torch.tensor(is_manager, dtype=torch.bool),
                    torch.tensor(reward, dtype=torch.float32),
                    torch.tensor(index, dtype=torch.long), keys)  # fmt: skip


def manager_trains(step: int, manager_every: int) -> bool:
    """Whether the manager's rows train at ``step`` (the slow time scale)."""
    return step % manager_every == 0


def worker_advantages(
    rewards: torch.Tensor,  # (R,) subgoal rewards
    keys: torch.Tensor,  # (R,) baseline key per row, -1 = not a worker row
    valid: torch.Tensor,  # (R,) bool: the row's episode counts (not a harness fault)
    scale: bool = True,
) -> torch.Tensor:  # (R,) 0 on manager and invalid rows
    """GRPO-style advantages of worker rows against the mean (and std) of their key."""
    return group_advantages(rewards, keys, valid & (keys >= 0), scale=scale)  # (R,)


def row_advantages(
    episode_adv: torch.Tensor,  # (N,) the episodes' GRPO advantages
    owner: torch.Tensor,  # (R,) each row's episode
    is_manager: torch.Tensor,  # (R,) bool
    worker_adv: torch.Tensor,  # (R,) worker advantages (worker_advantages)
    *,
    manager_on: bool,
    manager_weight: float = 1.0,
    worker_weight: float = 1.0,
) -> torch.Tensor:  # (R,)
    """Each row's advantage: manager rows their episode's (times ``manager_weight``, 0 when
    the manager does not train this step), worker rows their own (times ``worker_weight``)."""
    manager = episode_adv[owner] * (manager_weight if manager_on else 0.0)  # (R,)
    return torch.where(is_manager, manager, worker_adv * worker_weight)  # (R,)


def hierarchical_signals(
    trajs: list[Trajectory],
    batch: Batch,
    episode_adv: torch.Tensor,  # (N,)
    owner: torch.Tensor,  # (R,)
    valid: torch.Tensor,  # (N,) bool
    step: int,
    h,  # HierarchyConfig
    scale: bool = True,
) -> tuple[Batch, torch.Tensor, dict[str, float]]:
    """The batch (manager rows' mask cleared on off steps), the rows' advantages (R,) and
    ``hier/`` metrics of one step."""
    roles = row_roles(trajs, h.worker_baseline)
    on = manager_trains(step, h.manager_every)
    worker_adv = worker_advantages(roles.worker_reward, roles.worker_key, valid[owner], scale)
    adv = row_advantages(
        episode_adv,
        owner,
        roles.is_manager,
        worker_adv,
        manager_on=on,
        manager_weight=h.manager_weight,
        worker_weight=h.worker_weight,
    )
    if not on:
        keep = (~roles.is_manager).to(batch.mask.dtype)[:, None]  # (R, 1)
        batch = replace(batch, mask=batch.mask * keep)  # (R, T-1)
    workers = ~roles.is_manager & valid[owner]  # (R,)
    n = max(int(workers.sum()), 1)
    metrics = {
        "hier/manager_trained": float(on),
        "hier/worker_rows": float(workers.sum()),
        "hier/subgoals_per_episode": float((~roles.is_manager).sum()) / max(len(trajs), 1),
        "hier/subgoal_reward": float(roles.worker_reward[workers].sum()) / n,
        "hier/worker_adv_abs": float(worker_adv[workers].abs().sum()) / n,
    }
    return batch, adv, metrics
