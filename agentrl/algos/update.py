"""The one update loop of every algorithm, and its mechanics: minibatches, micro-batches,
guarded steps, autocast.

- ``run_updates``: epochs x length-grouped minibatches, each one optimizer step whose gradient
  is accumulated over micro-batches; an algorithm supplies only its micro-batch loss.
- ``micro_batches``: a minibatch (one optimizer step) is split into ``grad_accum`` pieces and
  further so that no piece holds more than ``token_budget`` padded tokens; gradients add up.
  ``token_budget="auto"`` (``algo.micro_batch_tokens``' default) is estimated once per model
  from the free memory and the model's shapes (``agentrl.algos.memory``).
- ``guarded_step``: clip, then step only if the loss and the grad norm are finite; the
  ``NanGuard`` stops the run after ``patience`` skipped updates in a row.
- ``autocast`` (``agentrl.precision``): bf16 autocast where the device supports it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

import torch

from agentrl.algos.batch import Batch, Signals, select_rows
from agentrl.algos.memory import resolve_token_budget
from agentrl.precision import autocast

#: ``micro_loss(mb, signals, policy_share, value_share) -> (weighted loss, weighted stats)``:
#: one micro-batch's loss already multiplied by its shares of the minibatch's policy and value
#: losses (``micro_weights``), so the accumulated gradient is the whole minibatch's.
MicroLoss = Callable[[Batch, Signals, float, float], tuple[torch.Tensor, dict[str, float]]]


def run_updates(
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    signals: Signals,
    micro_loss: MicroLoss,
    *,
    epochs: int,
    minibatches: int,
    max_grad_norm: float,
    rng: random.Random,
    loss_agg: str,
    grad_accum: int = 1,
    token_budget: int | str = 0,
    amp_dtype: torch.dtype | None = None,
    stop_early: Callable[[dict[str, float]], bool] | None = None,
) -> dict[str, Any]:
    """Epochs x minibatches optimizer steps on one rollout batch; returns mean statistics.

    A non-finite loss or gradient norm skips that step (``stats["stepped"]`` lists every
    update's outcome). ``stop_early(minibatch stats)`` True ends all epochs (PPO's target KL);
    with it, ``stats["early_stop"]`` says whether it fired. ``token_budget``: padded tokens per
    micro-batch, 0 = no limit, ``"auto"`` = from free memory (``resolve_token_budget``).
    """
    token_budget = resolve_token_budget(token_budget, model, optimizer, amp_dtype)
    device = next(model.parameters()).device
    params = [p for g in optimizer.param_groups for p in g["params"]]
    rows = batch.rows_with_tokens()
    lengths = batch.attention.sum(-1).tolist()  # (B,) real tokens per row
    totals: dict[str, float] = {}
    stepped: list[bool] = []
    early_stop = False
    model.train()
    for _ in range(epochs):
        for mb_rows in length_grouped_minibatches(rows, lengths, minibatches, rng):
            pieces = micro_weights(
                mb_rows, lengths, batch.mask, signals.value_mask, loss_agg, grad_accum, token_budget
            )
            optimizer.zero_grad(set_to_none=True)  # nothing left over from elsewhere
            sums, finite = _accumulate(batch, signals, pieces, micro_loss, device, amp_dtype)
            grad_norm, ok = guarded_step(params, optimizer, max_grad_norm, finite)
            stepped.append(ok)
            if ok:
                for k, v in {**sums, "grad_norm": grad_norm}.items():
                    totals[k] = totals.get(k, 0.0) + v
            if stop_early is not None and stop_early(sums):
                early_stop = True
                break
        if early_stop:
            break
    n_ok = sum(stepped)
    out = {k: v / max(n_ok, 1) for k, v in totals.items()}
    out |= {"updates": float(n_ok), "skipped": float(len(stepped) - n_ok)}
    if stop_early is not None:
        out["early_stop"] = float(early_stop)
    return out | {"stepped": stepped}


def _accumulate(
    batch: Batch,
    signals: Signals,
    pieces: list[tuple[list[int], float, float]],
    micro_loss: MicroLoss,
    device: torch.device,
    amp_dtype: torch.dtype | None,
) -> tuple[dict[str, float], bool]:
    """Backward every micro-batch of one minibatch; (summed weighted stats, all finite)."""
    sums: dict[str, float] = {}
    for rows, w_pol, w_val in pieces:
        mb, sig = select_rows(batch, signals, rows)
        with autocast(device, amp_dtype):
            loss, stats = micro_loss(mb.to(device), sig.to(device), w_pol, w_val)
        if not torch.isfinite(loss):
            return sums, False
        loss.backward()
        for k, v in stats.items():
            sums[k] = sums.get(k, 0.0) + v
    return sums, True


def length_grouped_minibatches(
    rows: list[int], lengths: list[int], minibatches: int, rng: random.Random
) -> list[list[int]]:
    """Split rows into ``minibatches`` groups of similar length (less padding), random order."""
    order = sorted(rows, key=lambda i: (lengths[i], rng.random()))
    size = max(1, -(-len(order) // minibatches))
    groups = [order[s : s + size] for s in range(0, len(order), size)]
    rng.shuffle(groups)
    return groups


def micro_batches(
    rows: list[int], lengths: list[int], grad_accum: int = 1, token_budget: int = 0
) -> list[list[int]]:
    """Split ``rows`` into at least ``grad_accum`` pieces, each within ``token_budget``.

    A piece's cost is ``len(piece) * max(lengths of its rows)`` (the padded tensor size);
    a single row longer than the budget is a piece of its own. ``token_budget = 0``: no limit.
    """
    size = max(1, -(-len(rows) // max(grad_accum, 1)))
    pieces = [rows[s : s + size] for s in range(0, len(rows), size)]
    if token_budget <= 0:
        return pieces
    out: list[list[int]] = []
    for piece in pieces:
        current: list[int] = []
        width = 0
        for r in sorted(piece, key=lambda i: lengths[i]):
            w = max(width, lengths[r])
            if current and w * (len(current) + 1) > token_budget:
                out.append(current)
                current, w = [], lengths[r]
            current.append(r)
            width = w
        if current:
            out.append(current)
    return out


def micro_weights(
    rows: list[int],
    lengths: list[int],
    mask: torch.Tensor,  # (B, T) policy-loss mask of the whole batch
    value_mask: torch.Tensor | None,  # (B, T) value-loss mask, or None
    agg: str,
    grad_accum: int = 1,
    token_budget: int = 0,
) -> list[tuple[list[int], float, float]]:
    """Micro-batches of one minibatch with their shares of the policy and value losses.

    Policy share: of the minibatch's policy tokens (``token_mean``) or rows (``seq_mean``);
    value share: of its value tokens. Each share sums to 1 over the pieces, so accumulating
    ``share * piece loss`` gives the gradient of the whole minibatch's loss.
    """
    pieces = micro_batches(rows, lengths, grad_accum, token_budget)
    if len(pieces) == 1:
        return [(pieces[0], 1.0, 1.0)]
    if agg == "seq_mean":
        pol = [float(len(p)) for p in pieces]
    else:
        pol = [float(mask[p].sum()) for p in pieces]
    val = [1.0 if value_mask is None else float(value_mask[p].sum()) for p in pieces]
    tp, tv = max(sum(pol), 1.0), max(sum(val), 1.0)
    return [(p, a / tp, b / tv) for p, a, b in zip(pieces, pol, val, strict=True)]


NOISE_GRAD_NORM = 1e-6  # below: round-off (a real update's norm is 1e-3 and up)


def guarded_step(
    params: Iterable[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    max_grad_norm: float,
    loss_finite: bool,
) -> tuple[float, bool]:
    """Clip gradients and step unless the loss or the gradient norm is NaN/Inf.

    Returns (grad norm, stepped). Gradients are cleared either way, so a skipped update
    leaves parameters and optimizer state exactly as they were. A gradient norm below
    ``NOISE_GRAD_NORM`` is round-off, not signal (every advantage 0 and the policy still
    equal to its reference): the update counts as taken but the optimizer does not step,
    because Adam divides by the gradient's own scale and would turn that noise into a
    full-size step in a random direction.
    """
    grad_norm = torch.nn.utils.clip_grad_norm_(list(params), max_grad_norm)
    ok = bool(loss_finite) and bool(torch.isfinite(grad_norm))
    if ok and float(grad_norm) >= NOISE_GRAD_NORM:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(grad_norm), ok


class NonFiniteError(RuntimeError):
    """Too many non-finite updates in a row; the run stopped (a checkpoint was written)."""


class NanGuard:
    """Counts skipped (non-finite) updates in a row across steps."""

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.in_a_row = 0
        self.total_skipped = 0

    def observe(self, stepped: list[bool]) -> bool:
        """Feed one RL step's update outcomes; True when ``patience`` skips in a row are reached."""
        for ok in stepped:
            self.in_a_row = 0 if ok else self.in_a_row + 1
            self.total_skipped += 0 if ok else 1
        return self.patience > 0 and self.in_a_row >= self.patience

    def state_dict(self) -> dict[str, int]:
        return {"in_a_row": self.in_a_row, "total_skipped": self.total_skipped}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.in_a_row, self.total_skipped = int(state["in_a_row"]), int(state["total_skipped"])
