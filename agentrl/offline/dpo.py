"""DPO from logged episodes: preference pairs between episodes of the same task instance
(``agentrl.offline.logs.instance_key``) and the DPO update of ``agentrl.algos.dpo`` on them.

Per instance, its best valid episode is chosen over its worst when their rewards differ by
more than ``algo.dpo.min_gap`` (a success over a failure, or a reward gap), exactly the rule
``algo.name: dpo`` applies to one step's group, here over every log given: an instance played
in several steps or runs pools its episodes. Harness faults are never in a pair.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import torch

from agentrl.algos.batch import build_batch
from agentrl.algos.dpo import dpo_update, preference_pairs
from agentrl.algos.forward import reference_logprobs
from agentrl.offline.logs import instance_key
from agentrl.types import Trajectory


def log_pairs(trajs: list[Trajectory], min_gap: float = 0.0) -> list[tuple[int, int]]:
    """(chosen, rejected) indices into ``trajs``: one pair per task instance (best valid
    episode over worst valid one, reward gap > ``min_gap``), instances in first-seen order."""
    keys: dict[tuple, int] = {}
    grouped = [replace(t, group_id=keys.setdefault(instance_key(t), len(keys))) for t in trajs]
    valid = torch.tensor([not t.is_harness_fault for t in trajs], dtype=torch.bool)  # (N,)
    return preference_pairs(grouped, valid, min_gap) if trajs else []


def single_context(trajs: list[Trajectory], algo: str) -> None:
    """Refuse episodes played in several contexts (memory segments), naming the first."""
    for t in trajs:
        if t.segments:
            raise ValueError(
                f"offline {algo} trains whole episodes in one context; episode {t.task_id!r} "
                f"was played in {len(t.segments)} segments (rollout.memory): leave such runs out"
            )


def train_dpo(
    policy: Any,
    ref: Any,
    optimizer: torch.optim.Optimizer,
    trajs: list[Trajectory],
    pairs: list[tuple[int, int]],
    *,
    pad_id: int,
    beta: float,
    epochs: int,
    batch_pairs: int,
    max_grad_norm: float,
    temperature: float,
    seed: int,
) -> dict[str, Any]:
    """``epochs`` passes of DPO over ``pairs`` (``batch_pairs`` pairs per optimizer step)
    against ``ref``'s log-probs; the mean stats of ``dpo_update``."""
    if not pairs:
        raise ValueError(
            "no preference pairs: no task instance in the logs has two valid episodes whose "
            "rewards differ by more than algo.dpo.min_gap (log more episodes per instance, "
            "rollout.group_size >= 2, or lower the gap)"
        )
    used = sorted({i for p in pairs for i in p})
    row = {i: r for r, i in enumerate(used)}
    sub = [trajs[i] for i in used]
    single_context(sub, "dpo")
    valid = torch.ones(len(sub), dtype=torch.bool)
    batch = build_batch(sub, valid, pad_id)
    batch = batch.with_reference(reference_logprobs(ref, batch, temperature))
    rows = [(row[c], row[r]) for c, r in pairs]
    minibatches = max(1, -(-len(rows) // batch_pairs))
    return dpo_update(policy, optimizer, batch, rows, beta=beta, epochs=epochs,
                      minibatches=minibatches, max_grad_norm=max_grad_norm,
                      temperature=temperature, rng=random.Random(seed))  # fmt: skip
