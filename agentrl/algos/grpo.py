"""GRPO update: trajectories -> padded tensors -> clipped-ratio loss with KL -> optimizer steps."""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from typing import Any

import torch

from agentrl.algos.advantages import (
    group_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)
from agentrl.algos.losses import grpo_loss, masked_mean, token_entropy, token_logprobs
from agentrl.algos.update import autocast, guarded_step, micro_weights
from agentrl.algos.value import policy_forward
from agentrl.policy.prefix import MIN_SHARED_PREFIX, batch_prefix_length, suffix_logits
from agentrl.types import Trajectory


@dataclass
class Batch:
    """Right-padded training tensors; position t predicts token t+1.

    ``advantages`` is (B,) per episode (GRPO) or (B, T-1) per token (PPO). The PPO fields
    ``old_values``, ``returns`` and ``value_mask`` are (B, T-1), aligned with ``targets``:
    entry t is V(state after tokens 0..t), the state in which target t is sampled.
    """

    input_ids: torch.Tensor  # (B, T)
    attention: torch.Tensor  # (B, T)
    targets: torch.Tensor  # (B, T-1) ids at positions 1..T-1
    mask: torch.Tensor  # (B, T-1) 1 = policy token that counts in the loss
    old_logp: torch.Tensor  # (B, T-1) rollout-time log-probs of targets
    advantages: torch.Tensor  # (B,) or (B, T-1)
    ref_logp: torch.Tensor | None = None  # (B, T-1)
    old_values: torch.Tensor | None = None  # (B, T-1) PPO: critic values at rollout time
    returns: torch.Tensor | None = None  # (B, T-1) PPO: value targets
    value_mask: torch.Tensor | None = None  # (B, T-1) PPO: 1 where the value loss counts

    def to(self, device) -> Batch:
        """The same batch on ``device``."""
        return Batch(
            **{
                f.name: None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
                for f in fields(self)
            }
        )

    def select(self, rows: list[int]) -> Batch:
        """A minibatch, trimmed to its own longest sequence."""
        idx = torch.tensor(rows, dtype=torch.long)
        width = int(self.attention[idx].sum(-1).max())
        out = {}
        for f in fields(self):
            x = getattr(self, f.name)
            if x is None or (f.name == "advantages" and x.dim() == 1):
                out[f.name] = None if x is None else x[idx]
            elif f.name in ("input_ids", "attention"):
                out[f.name] = x[idx, :width]
            else:
                out[f.name] = x[idx, : width - 1]
        return Batch(**out)

    def rows_with_tokens(self) -> list[int]:
        """Rows that have at least one policy token in the loss (invalid rows have none)."""
        return [i for i in range(self.input_ids.shape[0]) if self.mask[i].sum() > 0]


def episode_validity(trajs: list[Trajectory], truncation: str) -> torch.Tensor:
    """(N,) bool: harness faults never count; truncations count unless truncation == 'mask'."""
    valid = []
    for t in trajs:
        truncated = t.termination in ("max_turns", "length")
        valid.append(not t.is_harness_fault and not (truncated and truncation == "mask"))
    return torch.tensor(valid, dtype=torch.bool)


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
    truncated episodes (``auto`` is resolved by ``agentrl.rl_setup.resolve_truncation``).
    """
    if rewards is None:
        rewards = torch.tensor([t.reward.total for t in trajs], dtype=torch.float32)  # (N,)
    groups = torch.tensor([t.group_id for t in trajs], dtype=torch.long)  # (N,)
    valid = episode_validity(trajs, truncation)
    if estimator == "grpo":
        return group_advantages(rewards, groups, valid, scale=scale), valid
    if estimator == "rloo":
        return rloo_advantages(rewards, groups, valid), valid
    if estimator == "reinforce_pp":
        return reinforce_pp_advantages(rewards, groups, valid), valid
    raise ValueError(
        f"config field 'algo.advantage' must be one of {ESTIMATORS}, got {estimator!r}"
    )


def build_batch(
    trajs: list[Trajectory], advantages: torch.Tensor, valid: torch.Tensor, pad_id: int
) -> Batch:
    """Pad trajectories into tensors; invalid episodes keep their rows with an all-zero mask."""
    width = max(len(t.token_ids) for t in trajs)
    n = len(trajs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.float32)
    old = torch.zeros((n, width), dtype=torch.float32)
    for i, t in enumerate(trajs):
        k = len(t.token_ids)
        ids[i, :k] = torch.tensor(t.token_ids)
        attention[i, :k] = 1
        if valid[i]:
            mask[i, :k] = torch.tensor(t.loss_mask, dtype=torch.float32)
        old[i, :k] = torch.tensor(t.logprobs, dtype=torch.float32)
    return Batch(ids, attention, ids[:, 1:], mask[:, 1:], old[:, 1:], advantages)


def forward_logprobs(
    model,
    batch: Batch,
    temperature: float,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    with_hidden: bool = False,
) -> tuple:
    """Log-probs (B, T-1) of the batch's targets under ``model``, entropies (B, T-1) if asked.

    ``entropy_grad``: keep the entropy in the graph (for an entropy bonus). ``with_hidden``:
    also return the last hidden state (B, T, H) for a value head (a third element).
    Without ``with_hidden``, the rows' shared prompt prefix is computed once
    (``agentrl.policy.prefix``); targets inside it carry no loss and get log-prob 0.
    """
    shared = 0 if with_hidden else loss_free_prefix_length(model, batch)
    if shared:
        logits, hidden = suffix_logits(model, batch.input_ids, batch.attention, shared), None
    else:
        logits, hidden = policy_forward(model, batch.input_ids, batch.attention, with_hidden)
    logits = logits[:, :-1]  # (B, T-1-shared, V): predictions of targets shared..T-2
    logp = _pad_left(token_logprobs(logits, batch.targets[:, shared:], temperature), shared)
    ent = None
    if with_entropy:
        ent = token_entropy(logits if entropy_grad else logits.detach(), temperature)
        ent = _pad_left(ent, shared)
    return (logp, ent, hidden) if with_hidden else (logp, ent)


def loss_free_prefix_length(model, batch: Batch) -> int:
    """Tokens all rows share before any target in the loss (0 when too few to be worth it, or
    under gradient checkpointing, which does not run with a KV cache)."""
    checkpointing = getattr(model, "is_activation_checkpointing", None)
    if checkpointing is None:  # transformers releases before the rename
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if batch.input_ids.shape[0] < 2 or checkpointing:
        return 0
    n = batch_prefix_length(batch.input_ids, batch.attention)
    in_loss = batch.mask.bool().any(dim=0).nonzero()  # target t = token t + 1
    if len(in_loss):
        n = min(n, int(in_loss[0]))
    return n if n >= MIN_SHARED_PREFIX else 0


def _pad_left(x: torch.Tensor, n: int) -> torch.Tensor:
    """(B, T) -> (B, n + T) with zeros in front (the shared prefix's loss-free targets)."""
    return torch.cat([x.new_zeros(x.shape[0], n), x], dim=1) if n else x


@torch.no_grad()
def reference_logprobs(
    ref_model, batch: Batch, temperature: float, chunk: int = 16
) -> torch.Tensor:
    """Reference-policy log-probs of the batch targets, computed in chunks. (B, T-1)."""
    device = next(ref_model.parameters()).device
    width = batch.input_ids.shape[1]
    out = torch.zeros_like(batch.old_logp)  # (B, T-1)
    for s in range(0, batch.input_ids.shape[0], chunk):
        rows = list(range(s, min(s + chunk, batch.input_ids.shape[0])))
        sub = batch.select(rows).to(device)
        lp = forward_logprobs(ref_model, sub, temperature)[0].to(out.device)
        out[rows, : lp.shape[1]] = lp
    assert out.shape[1] == width - 1
    return out


def length_grouped_minibatches(
    rows: list[int], lengths: list[int], minibatches: int, rng: random.Random
) -> list[list[int]]:
    """Split rows into ``minibatches`` groups of similar length (less padding), random order."""
    order = sorted(rows, key=lambda i: (lengths[i], rng.random()))
    size = max(1, -(-len(order) // minibatches))
    groups = [order[s : s + size] for s in range(0, len(order), size)]
    rng.shuffle(groups)
    return groups


def grpo_update(
    model,
    optimizer,
    batch: Batch,
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
) -> dict[str, Any]:
    """Epochs x minibatches optimizer steps on one rollout batch; returns mean statistics.

    Each minibatch is one optimizer step, its gradient accumulated over micro-batches
    (``grad_accum`` pieces, each within ``token_budget`` padded tokens). A non-finite loss or
    gradient norm skips the step; ``stats["stepped"]`` lists each update's outcome.
    """
    device = next(model.parameters()).device
    params = [p for g in optimizer.param_groups for p in g["params"]]
    rows = batch.rows_with_tokens()
    lengths = batch.attention.sum(-1).tolist()  # (B,) real tokens per row
    totals: dict[str, float] = {}
    stepped: list[bool] = []
    model.train()
    for _ in range(epochs):
        for mb_rows in length_grouped_minibatches(rows, lengths, minibatches, rng):
            weights = micro_weights(
                mb_rows, lengths, batch.mask, None, loss_agg, grad_accum, token_budget
            )
            optimizer.zero_grad(set_to_none=True)  # nothing left over from elsewhere
            sums: dict[str, float] = {}
            finite = True
            for micro, w, _ in weights:
                mb_dev = batch.select(micro).to(device)
                with autocast(device, amp_dtype):
                    logp, ent = forward_logprobs(
                        model, mb_dev, temperature, with_entropy=True, entropy_grad=entropy_coef > 0
                    )
                loss, stats = grpo_loss(
                    logp,
                    mb_dev.old_logp,
                    mb_dev.ref_logp,
                    mb_dev.advantages,
                    mb_dev.mask,
                    clip_eps,
                    kl_coef,
                    loss_agg,
                    kl_kind,
                )
                entropy = masked_mean(ent, mb_dev.mask, loss_agg)
                if entropy_coef > 0:
                    loss = loss - entropy_coef * entropy
                if not torch.isfinite(loss):
                    finite = False
                    break
                (loss * w).backward()
                stats = {**stats, "total": loss.detach(), "entropy": entropy.detach()}
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + w * float(v)
            grad_norm, ok = guarded_step(params, optimizer, max_grad_norm, finite)
            stepped.append(ok)
            if ok:
                for k, v in {**sums, "grad_norm": grad_norm}.items():
                    totals[k] = totals.get(k, 0.0) + v
    n_ok = sum(stepped)
    return {k: v / max(n_ok, 1) for k, v in totals.items()} | {
        "updates": float(n_ok),
        "skipped": float(len(stepped) - n_ok),
        "stepped": stepped,
    }
