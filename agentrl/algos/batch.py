"""Training tensors of one RL step, built once from trajectories and never written to.

``Batch`` holds what the rollout produced (ids, loss mask, rollout log-probs) plus the
reference log-probs; ``Signals`` holds what an estimator derived from it (advantages and, for
PPO, value targets). Position t of a (B, T-1) tensor predicts token t+1.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from agentrl.types import Trajectory

TRUNCATED = ("max_turns", "length")


@dataclass(frozen=True)
class Batch:
    """Right-padded rollout tensors of one RL step."""

    input_ids: torch.Tensor  # (B, T)
    attention: torch.Tensor  # (B, T)
    targets: torch.Tensor  # (B, T-1) ids at positions 1..T-1
    mask: torch.Tensor  # (B, T-1) 1 = policy token that counts in the loss
    old_logp: torch.Tensor  # (B, T-1) rollout-time log-probs of targets
    ref_logp: torch.Tensor | None = None  # (B, T-1) reference-policy log-probs
    #: (B, T-1) truncated importance weights of stale rollout tokens (asynchronous rollout,
    #: ``agentrl.algos.offpolicy``); None = every token weighs 1
    is_weight: torch.Tensor | None = None

    def with_reference(self, ref_logp: torch.Tensor | None) -> Batch:
        """The same batch carrying the reference log-probs (B, T-1)."""
        return replace(self, ref_logp=ref_logp)

    def to(self, device) -> Batch:
        return Batch(**{f.name: _to(getattr(self, f.name), device) for f in fields(self)})

    def width(self, rows: list[int]) -> int:
        """The longest real sequence among ``rows``."""
        return int(self.attention[torch.tensor(rows, dtype=torch.long)].sum(-1).max())

    def select(self, rows: list[int], width: int | None = None) -> Batch:
        """A minibatch of ``rows``, trimmed to ``width`` (default: its longest sequence)."""
        idx = torch.tensor(rows, dtype=torch.long)
        width = self.width(rows) if width is None else width
        out = {}
        for f in fields(self):
            x = getattr(self, f.name)
            cut = width if f.name in ("input_ids", "attention") else width - 1
            out[f.name] = None if x is None else x[idx, :cut]
        return Batch(**out)

    def rows_with_tokens(self) -> list[int]:
        """Rows that have at least one policy token in the loss (invalid rows have none)."""
        return [i for i in range(self.input_ids.shape[0]) if self.mask[i].sum() > 0]


@dataclass(frozen=True)
class Signals:
    """Per-row learning signals: ``advantages`` (B,) per episode (critic-free estimators) or
    (B, T-1) per token (PPO); the PPO value fields are (B, T-1), entry t = V(state after
    tokens 0..t), the state in which target t is sampled."""

    advantages: torch.Tensor  # (B,) or (B, T-1)
    old_values: torch.Tensor | None = None  # (B, T-1) critic values at rollout time
    returns: torch.Tensor | None = None  # (B, T-1) value targets
    value_mask: torch.Tensor | None = None  # (B, T-1) 1 where the value loss counts

    def to(self, device) -> Signals:
        return Signals(**{f.name: _to(getattr(self, f.name), device) for f in fields(self)})

    def select(self, rows: list[int], width: int) -> Signals:
        """Rows ``rows``; per-token fields cut to ``width - 1`` targets (``Batch.select``)."""
        idx = torch.tensor(rows, dtype=torch.long)
        out = {}
        for f in fields(self):
            x = getattr(self, f.name)
            if x is None or x.dim() == 1:
                out[f.name] = None if x is None else x[idx]
            else:
                out[f.name] = x[idx, : width - 1]
        return Signals(**out)


def select_rows(batch: Batch, signals: Signals, rows: list[int]) -> tuple[Batch, Signals]:
    """A minibatch of both, trimmed to the rows' longest sequence."""
    width = batch.width(rows)
    return batch.select(rows, width), signals.select(rows, width)


def _to(x: torch.Tensor | None, device) -> torch.Tensor | None:
    return None if x is None else x.to(device)


def episode_validity(trajs: list[Trajectory], truncation: str) -> torch.Tensor:
    """(N,) bool: harness faults never count; truncations count unless truncation == 'mask'."""
    valid = []
    for t in trajs:
        truncated = t.termination in TRUNCATED
        valid.append(not t.is_harness_fault and not (truncated and truncation == "mask"))
    return torch.tensor(valid, dtype=torch.bool)


def build_batch(trajs: list[Trajectory], valid: torch.Tensor, pad_id: int) -> Batch:
    """Pad trajectories into tensors; invalid episodes keep their rows with an all-zero mask."""
    width = max(len(t.token_ids) for t in trajs)
    n = len(trajs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)  # (B, T)
    attention = torch.zeros((n, width), dtype=torch.long)  # (B, T)
    mask = torch.zeros((n, width), dtype=torch.float32)  # (B, T)
    old = torch.zeros((n, width), dtype=torch.float32)  # (B, T)
    for i, t in enumerate(trajs):
        k = len(t.token_ids)
        ids[i, :k] = torch.tensor(t.token_ids)
        attention[i, :k] = 1
        if valid[i]:
            mask[i, :k] = torch.tensor(t.loss_mask, dtype=torch.float32)
        old[i, :k] = torch.tensor(t.logprobs, dtype=torch.float32)
    return Batch(ids, attention, ids[:, 1:], mask[:, 1:], old[:, 1:])
