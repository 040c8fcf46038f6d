"""Supervised fine-tuning on assistant tokens only (tiny-model pretraining, task warm start).

Each example is tokenized with ``encode_conversation``, exactly as a rollout would build it,
and only the tokens the policy would have generated (assistant bodies + ``<|im_end|>``)
carry loss. Batches are right-padded and grouped by length; AdamW, grad clip 1.0, linear
warmup then cosine decay to 10 %.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

import torch
import torch.nn.functional as F

from agentrl.chat.render import encode_conversation
from agentrl.precision import autocast
from agentrl.types import Message

Example = tuple[list[Message], list[dict[str, Any]] | None]


def masked_lm_loss(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor,
                   denominator: int | None = None) -> torch.Tensor:  # fmt: skip
    """Mean next-token cross-entropy over positions whose *target* has mask 1.

    logits (B, T, V), ids (B, T), mask (B, T) with 1 where the token is trained on.
    ``denominator``: divide the summed loss by this count instead (a micro-batch's share of
    a whole batch's mean).
    """
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
    tgt = ids[:, 1:]  # (B, T-1)
    nll = -logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    m = mask[:, 1:].to(nll.dtype)  # (B, T-1)
    if denominator is not None:
        return (nll * m).sum() / denominator
    return (nll * m).sum() / m.sum().clamp(min=1.0)


def vocab_size(model: Any) -> int:
    """The width of ``model``'s logits."""
    return int(model.get_output_embeddings().weight.shape[0])


def micro_batches(rows: list[tuple[list[int], list[int]]], max_logits: int | None,
                  vocab: int) -> list[list[tuple[list[int], list[int]]]]:  # fmt: skip
    """``rows`` in order, cut into runs whose padded logits (rows x longest x ``vocab``) stay
    within ``max_logits`` (a row alone may exceed it); one run when ``max_logits`` is None."""
    if max_logits is None:
        return [rows]
    parts: list[list[tuple[list[int], list[int]]]] = []
    longest = 0
    for row in rows:
        grown = max(longest, len(row[0]))
        if parts and (len(parts[-1]) + 1) * grown * vocab <= max_logits:
            parts[-1].append(row)
            longest = grown
        else:
            parts.append([row])
            longest = len(row[0])
    return parts


def lr_at(step: int, total: int, base_lr: float, warmup: int, schedule: str = "cosine") -> float:
    """Linear warmup over ``warmup`` steps, then constant or cosine decay to 10 % of base."""
    if warmup > 0 and step < warmup:
        return base_lr * (step + 1) / warmup
    if schedule == "constant":
        return base_lr
    frac = (step - warmup) / max(1, total - warmup)
    return base_lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(frac, 1.0))))


def collate(
    rows: list[tuple[list[int], list[int]]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad ``(ids, mask)`` rows: ids (B, T), loss mask (B, T), attention mask (B, T)."""
    t = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), t), pad_id, dtype=torch.long)  # (B, T)
    loss_mask = torch.zeros((len(rows), t), dtype=torch.long)  # (B, T)
    attn = torch.zeros((len(rows), t), dtype=torch.long)  # (B, T)
    for b, (r_ids, r_mask) in enumerate(rows):
        ids[b, : len(r_ids)] = torch.tensor(r_ids)
        loss_mask[b, : len(r_ids)] = torch.tensor(r_mask)
        attn[b, : len(r_ids)] = 1
    return ids, loss_mask, attn


def _shuffled_batches(
    n: int, batch_size: int, lengths: list[int], rng: random.Random
) -> list[list[int]]:
    """Plain shuffled index batches."""
    order = list(range(n))
    rng.shuffle(order)
    return [order[k : k + batch_size] for k in range(0, n, batch_size)]


def _batches(n: int, batch_size: int, lengths: list[int], rng: random.Random) -> list[list[int]]:
    """Shuffled index batches, length-grouped within windows of 16 batches (less padding)."""
    order = list(range(n))
    rng.shuffle(order)
    window = batch_size * 16
    batches = []
    for w in range(0, n, window):
        chunk = sorted(order[w : w + window], key=lambda i: lengths[i])
        batches += [chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def sft_train(
    model: Any,
    tokenizer: Any,
    examples: list[Example],
    *,
    max_len: int = 1024,
    **train_kwargs: Any,
) -> dict[str, Any]:
    """Train ``model`` on the assistant tokens of ``examples``; return {steps, final_loss, tokens}.

    Examples are tokenized exactly as a rollout would (``encode_conversation``) and truncated to
    ``max_len``; ``train_kwargs`` (epochs, lr, batch_size, seed, ...) go to ``train_rows``.
    """
    rows = []
    for msgs, tools in examples:
        ids, mask = encode_conversation(tokenizer, msgs, tools)
        rows.append((ids[:max_len], mask[:max_len]))
    return train_rows(model, tokenizer, rows, **train_kwargs)


def train_rows(
    model: Any,
    tokenizer: Any,
    rows: list[tuple[list[int], list[int]]],
    *,
    epochs: int = 1,
    lr: float = 1e-4,
    batch_size: int = 8,
    seed: int = 0,
    progress: bool = True,
    desc: str = "sft",
    warmup_steps: int = 0,
    schedule: str = "cosine",
    weight_decay: float = 0.0,
    group_by_length: bool = True,
    amp_dtype: torch.dtype | None = None,
    max_logits: int | None = None,
    stop_loss: float | None = None,
) -> dict[str, Any]:
    """Train on pre-tokenized ``(ids, loss_mask)`` rows; the loop behind ``sft_train``.

    Deterministic given ``seed`` (data order and torch RNG). ``final_loss`` is the mean loss
    over the last up-to-10 steps; ``steps`` the steps taken.
    ``stop_loss``: stop once that mean (over 10 full steps) is at or below it, before the planned
    epochs end: a warm start that still samples varied actions for RL to tell apart.

    ``group_by_length`` batches rows of similar length (less padding); plain shuffled batches
    learn copy drills markedly faster, so the tiny model's drill phase turns it off.
    ``amp_dtype``: autocast the forward in this dtype (``train.autocast``).
    ``max_logits``: split a batch into micro-batches of at most this many logits (padded rows x
    length x vocabulary; one row at least) and accumulate their gradients: the same loss (token
    mean over the whole batch) in a fraction of the memory, for long rows and big vocabularies
    (a SmolLM2 batch of 8 x 2,560 tokens needs ~50 GB whole). None: the batch in one forward.
    """
    torch.manual_seed(seed)
    rng = random.Random(seed)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    lengths = [len(r[0]) for r in rows]
    make_batches = _batches if group_by_length else _shuffled_batches
    plan = [b for _ in range(epochs) for b in make_batches(len(rows), batch_size, lengths, rng)]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    model.train()
    recent: list[float] = []
    tokens, vocab, taken = 0, vocab_size(model), 0
    with _progress(progress, desc, len(plan)) as advance:
        for step, idx in enumerate(plan):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, len(plan), lr, warmup_steps, schedule)
            opt.zero_grad(set_to_none=True)
            batch = [rows[i] for i in idx]
            trained = sum(sum(m[1:]) for _, m in batch)  # target positions of the whole batch
            loss_value = 0.0
            for part in micro_batches(batch, max_logits, vocab):
                ids, loss_mask, attn = collate(part, pad_id)
                with autocast(ids.device, amp_dtype):
                    logits = model(input_ids=ids, attention_mask=attn).logits  # (B, T, V)
                    loss = masked_lm_loss(logits.float(), ids, loss_mask, max(trained, 1))
                loss.backward()
                loss_value += loss.item()
                tokens += int(attn.sum())
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            recent = (recent + [loss_value])[-10:]
            advance(f"{desc} loss {sum(recent) / len(recent):.4f}")
            taken = step + 1
            if stop_loss is not None and len(recent) == 10 and sum(recent) / 10 <= stop_loss:
                break
    model.eval()
    final = sum(recent) / len(recent) if recent else float("nan")
    return {"steps": taken, "planned_steps": len(plan), "final_loss": final, "tokens": tokens}


class _progress:
    """A rich progress bar on a terminal, plain lines (about every tenth of the steps) when the
    output goes to a file or a pipe (a run in the background), or nothing;
    ``advance(description)`` moves it by one step."""

    def __init__(self, enabled: bool, desc: str, total: int) -> None:
        self.enabled, self.desc, self.total = enabled, desc, total
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return lambda _desc: None
        from rich.console import Console

        if not Console().is_terminal:
            return plain_progress(self.total)
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        self.bar.__enter__()
        task = self.bar.add_task(self.desc, total=self.total)
        return lambda d: self.bar.update(task, advance=1, description=d)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def plain_progress(
    total: int, lines: int = 10, clock=time.monotonic, unit: str = "steps", emit=None
):
    """``advance(description)`` that prints ``description: n/total <unit>, S s`` on about
    ``lines`` of the ``total`` steps (the last always), flushed: progress a log file shows.
    ``emit``: where a line goes (default ``print``, flushed; e.g. a rich console's ``print``)."""
    emit = emit or (lambda line: print(line, flush=True))
    every, start, done = max(1, total // lines), clock(), [0]

    def advance(desc: str) -> None:
        done[0] += 1
        if done[0] % every == 0 or done[0] == total:
            emit(f"{desc}: {done[0]}/{total} {unit}, {clock() - start:.0f} s")

    return advance
