"""GRPO update: trajectories -> padded tensors -> clipped-ratio loss with KL -> optimizer steps."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from agentrl.algos.advantages import group_advantages
from agentrl.algos.losses import grpo_loss, masked_mean, token_entropy, token_logprobs
from agentrl.types import Trajectory


@dataclass
class Batch:
    """Right-padded training tensors; position t predicts token t+1."""

    input_ids: torch.Tensor  # (B, T)
    attention: torch.Tensor  # (B, T)
    targets: torch.Tensor  # (B, T-1) ids at positions 1..T-1
    mask: torch.Tensor  # (B, T-1) 1 = policy token that counts in the loss
    old_logp: torch.Tensor  # (B, T-1) rollout-time log-probs of targets
    advantages: torch.Tensor  # (B,)
    ref_logp: torch.Tensor | None = None  # (B, T-1)

    def to(self, device) -> Batch:
        """The same batch on ``device``."""
        return Batch(
            *(
                None if x is None else x.to(device)
                for x in (
                    self.input_ids,
                    self.attention,
                    self.targets,
                    self.mask,
                    self.old_logp,
                    self.advantages,
                    self.ref_logp,
                )
            )
        )

    def select(self, rows: list[int]) -> Batch:
        """A minibatch, trimmed to its own longest sequence."""
        idx = torch.tensor(rows, dtype=torch.long)
        width = int(self.attention[idx].sum(-1).max())
        return Batch(
            self.input_ids[idx, :width],
            self.attention[idx, :width],
            self.targets[idx, : width - 1],
            self.mask[idx, : width - 1],
            self.old_logp[idx, : width - 1],
            self.advantages[idx],
            None if self.ref_logp is None else self.ref_logp[idx, : width - 1],
        )


def episode_validity(trajs: list[Trajectory], truncation: str) -> torch.Tensor:
    """(N,) bool: harness faults never count; truncations count only if truncation == 'zero'."""
    valid = []
    for t in trajs:
        truncated = t.termination in ("max_turns", "length")
        valid.append(not t.is_harness_fault and not (truncated and truncation == "mask"))
    return torch.tensor(valid, dtype=torch.bool)


def compute_advantages(
    trajs: list[Trajectory], truncation: str, scale: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages (N,) and validity (N,) for a list of grouped trajectories."""
    rewards = torch.tensor([t.reward.total for t in trajs], dtype=torch.float32)  # (N,)
    groups = torch.tensor([t.group_id for t in trajs], dtype=torch.long)  # (N,)
    valid = episode_validity(trajs, truncation)
    return group_advantages(rewards, groups, valid, scale=scale), valid


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
    model, batch: Batch, temperature: float, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, T-1) of the batch's targets under ``model`` (and entropies if asked)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention).logits[
        :, :-1
    ]  # (B, T-1, V)
    logp = token_logprobs(logits, batch.targets, temperature)
    ent = token_entropy(logits.detach(), temperature) if with_entropy else None
    return logp, ent


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
) -> dict[str, float]:
    """Epochs x minibatches optimizer steps on one rollout batch; returns mean statistics."""
    device = next(model.parameters()).device
    rows = [i for i in range(batch.input_ids.shape[0]) if batch.mask[i].sum() > 0]
    totals: dict[str, float] = {}
    n_updates = 0
    model.train()
    lengths = batch.attention.sum(-1).tolist()  # (B,) real tokens per row
    for _ in range(epochs):
        for mb_rows in length_grouped_minibatches(rows, lengths, minibatches, rng):
            mb_dev = batch.select(mb_rows).to(device)
            logp, ent = forward_logprobs(model, mb_dev, temperature, with_entropy=True)
            loss, stats = grpo_loss(
                logp,
                mb_dev.old_logp,
                mb_dev.ref_logp,
                mb_dev.advantages,
                mb_dev.mask,
                clip_eps,
                kl_coef,
                loss_agg,
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            stats = {
                **stats,
                "total": loss.detach(),
                "grad_norm": grad_norm.detach(),
                "entropy": masked_mean(ent, mb_dev.mask),
            }
            for k, v in stats.items():
                totals[k] = totals.get(k, 0.0) + float(v)
            n_updates += 1
    return {k: v / max(n_updates, 1) for k, v in totals.items()} | {"updates": float(n_updates)}
