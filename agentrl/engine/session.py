"""One rollout's decoding: sequences in KV-cache slots, continuous batching, cross-turn cache.

A ``DecodeSession`` keeps every live sequence's KV cache in a slot of a ``SlotKV`` from its
first turn to its last, so a new turn computes only the tokens the environment added (its
*delta*), never the history again. ``step()`` runs, in this order:

1. free slots go to queued sequences (the shared prompt prefix is copied in, not computed);
2. one prefill forward over the rows that start a turn (their unfed tokens, chunked);
3. one decode forward over the rows in the middle of a turn, one token each.

A row whose turn ends (stop token or its token budget) is returned to the caller and leaves
the decode batch while the caller runs its tools; other rows keep decoding. When it comes
back (``extend``) only the delta is prefilled. A finished sequence (``release``) frees its
slot for the next queued one, so the batch stays full.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import torch

from agentrl.engine.attention import engine_attention
from agentrl.engine.grammar import TurnConstraint, mask_logits
from agentrl.engine.kv import SlotKV
from agentrl.engine.sampling import choose_tokens
from agentrl.policy.generate import Sample
from agentrl.policy.parts import lm_parts
from agentrl.policy.prefix import cache_kwarg

PREFILL_CHUNK = 512  # most tokens of one row in one prefill forward


@dataclass(eq=False)
class _Seq:
    key: Hashable
    unfed: list[int]  # tokens of the sequence not yet in the cache
    max_new: int  # this turn's token budget
    generator: torch.Generator | None
    slot: int | None = None
    decoding: bool = False  # mid-turn: unfed holds exactly the last sampled token
    turn_ids: list[int] = field(default_factory=list)
    turn_logprobs: list[float] = field(default_factory=list)
    sampling: tuple[bool, float, float] | None = (
        None  # (greedy, temperature, top_p); None: the session's
    )
    constraint: TurnConstraint | None = None  # a grammar over each turn's tokens
    fork_of: tuple[_Seq, int] | None = None  # (source, its cached tokens to copy at slot time)


class DecodeSession:
    """Decode many sequences turn by turn with one slot cache; see the module docstring."""

    def __init__(self, model: Any, stop_ids: list[int], pad_id: int, *, slots: int,
                 capacity: int, temperature: float = 1.0, top_p: float = 1.0,
                 greedy: bool = False) -> None:  # fmt: skip
        self.model, self.stop, self.pad_id = model, set(stop_ids), pad_id
        self.temperature, self.top_p, self.greedy = temperature, top_p, greedy
        parts = lm_parts(model)
        if isinstance(parts, str):
            raise ValueError(f"the engine decodes transformers causal LMs only: {parts}")
        self.body, self.head = parts.decoder, parts.head
        self.cache_kw = cache_kwarg(model)
        dtype = next(model.parameters()).dtype
        self.kv = SlotKV(parts.decoder, slots, capacity, dtype)
        self.slots: list[_Seq | None] = [None] * slots
        self.queue: list[_Seq] = []
        self.seqs: dict[Hashable, _Seq] = {}
        self.prefix: tuple[list[int], SlotKV] | None = None
        self._pending_turn: set[Hashable] = set()  # keys whose turn starts with a prefill
        self.stats = {"prefill_tokens": 0, "decode_tokens": 0, "forwards": 0, "dummy_rows": 0}

    # -- what the caller does --------------------------------------------------------------
    def set_prefix(self, ids: list[int]) -> None:
        """Compute the KV cache of a prompt prefix shared by the sequences once; a sequence
        whose prompt starts with it gets a copy instead of computing it."""
        kv = SlotKV(self.body, 1, len(ids), self.kv.keys[0].dtype)
        self._forward(kv, [0], [ids])  # the cache is what is wanted; no head
        self.prefix = (list(ids), kv)

    def add(self, key: Hashable, prompt: list[int], max_new: int, seed: int | None,
            sampling: tuple[bool, float, float] | None = None,
            constraint: TurnConstraint | None = None) -> None:  # fmt: skip
        """A new sequence; it takes a slot when one is free. ``sampling``: its own (greedy,
        temperature, top_p) instead of the session's (a server's requests differ).
        ``constraint``: the grammar every turn of it must follow (``agentrl.engine.grammar``;
        restarted at each turn)."""
        greedy = self.greedy if sampling is None else sampling[0]
        gen = None
        if not greedy:
            gen = torch.Generator().manual_seed(int(seed if seed is not None else 0))
        if constraint is not None:  # a turn starts here (memory re-adds a live episode)
            constraint.reset()
        seq = _Seq(key, list(prompt), max_new, gen, sampling=sampling, constraint=constraint)
        self.seqs[key] = seq
        self.queue.append(seq)

    def extend(self, key: Hashable, delta: list[int], max_new: int,
               sampling: tuple[bool, float, float] | None = None,
               seed: int | None = None) -> None:  # fmt: skip
        """The next turn of ``key``: the environment's ``delta`` is appended after the last
        turn (whose final sampled token is still unfed). ``sampling``: its (greedy,
        temperature, top_p) from this turn on (a search follows a sampled branch greedily);
        ``seed``: sample this turn from a fresh generator with that seed."""
        seq = self.seqs[key]
        if seed is not None:
            seq.generator = torch.Generator().manual_seed(int(seed))
        if sampling is not None:
            if not sampling[0] and seq.generator is None:
                raise ValueError(f"{key!r} was added greedy: it has no sampling seed")
            seq.sampling = sampling
        seq.unfed.extend(delta)
        seq.max_new, seq.turn_ids, seq.turn_logprobs = max_new, [], []
        seq.decoding = False
        if seq.constraint is not None:
            seq.constraint.reset()
        self._pending_turn.add(key)

    def fork(self, key: Hashable, source: Hashable, max_new: int, seed: int | None,
             sampling: tuple[bool, float, float] | None = None) -> None:  # fmt: skip
        """A new sequence ``key`` that continues ``source``'s history: when it takes a slot it
        gets a copy of the tokens ``source`` has cached now, then feeds the ones ``source``
        has not fed. ``source`` must keep its slot (not released or rewound) until then; the
        branches of a tree search start this way without computing the shared history."""
        src = self.seqs[source]
        cached = self.cached(source)
        self.add(key, src.unfed, max_new, seed, sampling)
        if cached:
            self.seqs[key].fork_of = (src, cached)

    def cached(self, key: Hashable) -> int:
        """How many of ``key``'s tokens are in the cache (0 before it has a slot)."""
        seq = self.seqs[key]
        return 0 if seq.slot is None else int(self.kv.length[seq.slot])

    def rewind(self, key: Hashable, length: int, unfed: list[int]) -> None:
        """Keep the first ``length`` cached tokens of ``key`` (between turns), with ``unfed``
        after them still to feed: a tree search keeps a branch's first turn, not its
        lookahead. ``extend`` then starts the next turn."""
        seq = self.seqs[key]
        if seq.slot is None or self._in_turn(seq) or length > self.cached(key):
            raise ValueError(f"{key!r} cannot be rewound to {length} tokens now")
        self.kv.length[seq.slot] = length
        seq.unfed = list(unfed)

    def release(self, key: Hashable) -> None:
        """``key`` is finished: its slot goes to the next queued sequence (or is packed)."""
        seq = self.seqs.pop(key, None)
        self._pending_turn.discard(key)
        if seq is None:  # never added (its prompt was over the limit)
            return
        if seq.slot is None:
            self.queue = [s for s in self.queue if s is not seq]
            return
        free = seq.slot
        self.slots[free] = None
        self.kv.clear(free)
        last = max((i for i, s in enumerate(self.slots) if s is not None), default=-1)
        if last > free and not self.queue:  # keep the used slots at the front
            moved = self.slots[last]
            self.kv.move(last, free)
            self.slots[free], self.slots[last] = moved, None
            moved.slot = free

    @property
    def busy(self) -> bool:
        """Whether ``step`` has work: a sequence in a turn, or a queued one and a free slot."""
        if any(s is not None and self._in_turn(s) for s in self.slots):
            return True
        return bool(self.queue) and any(s is None for s in self.slots)

    @torch.no_grad()
    def step(self) -> list[tuple[Hashable, Sample]]:
        """Advance every sequence in a turn by one token; return the turns that ended."""
        was_training = self.model.training
        self.model.eval()
        try:
            self._fill_slots()
            ended = self._prefill()
            ended += self._decode()
        finally:
            if was_training:
                self.model.train()
        return ended

    # -- internals -------------------------------------------------------------------------
    def _in_turn(self, seq: _Seq) -> bool:
        return seq.decoding or seq.key in self._pending_turn

    def _fill_slots(self) -> None:
        for i, s in enumerate(self.slots):
            if s is None and self.queue:
                seq = self.queue.pop(0)
                seq.slot, self.slots[i] = i, seq
                self._pending_turn.add(seq.key)
                if seq.fork_of is not None:
                    src, n = seq.fork_of
                    self.kv.copy_prefix(self.kv, src.slot, i, n)
                    seq.fork_of = None
                elif self.prefix is not None:
                    ids, kv = self.prefix
                    n = len(ids)
                    if len(seq.unfed) > n and seq.unfed[:n] == ids:
                        self.kv.copy_prefix(kv, 0, i, n)
                        seq.unfed = seq.unfed[n:]

    def _prefill(self) -> list[tuple[Hashable, Sample]]:
        """One forward over the rows that start a turn (at most PREFILL_CHUNK tokens each)."""
        rows = [s for s in self.slots if s is not None and s.key in self._pending_turn]
        if not rows:
            return []
        chunks = [s.unfed[:PREFILL_CHUNK] for s in rows]
        hidden = self._forward(self.kv, [s.slot for s in rows], chunks)
        self.stats["prefill_tokens"] += sum(map(len, chunks))
        done = []
        for s, chunk in zip(rows, chunks, strict=True):
            s.unfed = s.unfed[len(chunk) :]
            done.append(not s.unfed)
        ready = [s for s, d in zip(rows, done, strict=True) if d]
        for s in ready:
            self._pending_turn.discard(s.key)
            s.decoding = True
        if not ready:
            return []
        picked = torch.tensor(done)
        return self._sample(ready, self._logits(hidden[picked] if not all(done) else hidden))

    def _decode(self) -> list[tuple[Hashable, Sample]]:
        """One token for each row in the middle of a turn (rows whose first token came from
        this step's prefill included)."""
        rows = [s for s in self.slots if s is not None and s.decoding and len(s.unfed) == 1
                and s.turn_ids]  # fmt: skip
        if not rows:
            return []
        slots = [s.slot for s in rows]
        hi = max(slots) + 1
        if len(rows) * 2 >= hi:  # the leading slots as a view; idle ones ride along
            busy = set(slots)
            members = [self.slots[i] if i in busy else None for i in range(hi)]
            feed = [[m.unfed[0]] if m is not None else [] for m in members]
            hidden = self._forward(self.kv, list(range(hi)), feed)
            self.stats["dummy_rows"] += hi - len(rows)
            if hi > len(rows):
                hidden = hidden[torch.tensor([m is not None for m in members])]
        else:
            hidden = self._forward(self.kv, slots, [s.unfed[:1] for s in rows])
        for s in rows:
            s.unfed = []
        self.stats["decode_tokens"] += len(rows)
        return self._sample(rows, self._logits(hidden))

    def partial(self, key: Hashable) -> list[int]:
        """The ids ``key`` has sampled so far in its current turn (for streaming)."""
        seq = self.seqs.get(key)
        return list(seq.turn_ids) if seq is not None else []

    def partial_logprobs(self, key: Hashable) -> list[float]:
        """The log-probs of ``partial(key)`` (a turn cut short by its caller)."""
        seq = self.seqs.get(key)
        return list(seq.turn_logprobs) if seq is not None else []

    def _choose(self, rows: list[_Seq], logits: torch.Tensor) -> tuple[list[int], list[float]]:
        """Token ids and log-probs of ``rows``, each group of rows with the same sampling
        settings in one ``choose_tokens``; a constrained row chooses among the tokens its
        grammar allows (its log-prob is under that masked distribution)."""
        logits = mask_logits(logits, [s.constraint for s in rows])
        own = (self.greedy, self.temperature, self.top_p)
        groups: dict[tuple[bool, float, float], list[int]] = {}
        for i, s in enumerate(rows):
            groups.setdefault(s.sampling or own, []).append(i)
        ids, lps = [0] * len(rows), [0.0] * len(rows)
        for (greedy, temperature, top_p), members in groups.items():
            gens = None if greedy else [rows[i].generator for i in members]
            part = logits if len(members) == len(rows) else logits[torch.tensor(members)]
            got, got_lp = choose_tokens(part, gens, temperature=temperature, top_p=top_p)
            for i, t, lp in zip(members, got.tolist(), got_lp.tolist(), strict=True):
                ids[i], lps[i] = t, lp
        for s, t in zip(rows, ids, strict=True):
            if s.constraint is not None:
                s.constraint.advance(t)
        return ids, lps

    def _sample(self, rows: list[_Seq], logits: torch.Tensor) -> list[tuple[Hashable, Sample]]:
        ids, lps = self._choose(rows, logits)
        ended = []
        for s, t, lp in zip(rows, ids, lps, strict=True):
            s.turn_ids.append(t)
            s.turn_logprobs.append(lp)
            s.unfed = [t]
            stopped = t in self.stop
            if stopped or len(s.turn_ids) >= s.max_new:
                s.decoding = False
                ended.append((s.key, Sample(s.turn_ids, s.turn_logprobs, stopped)))
        return ended

    def _forward(self, kv: SlotKV, slots: list[int], feeds: list[list[int]]) -> torch.Tensor:
        """Run the model on ``feeds[i]`` new tokens of slot ``slots[i]`` (a row with no
        tokens rides along as padding); the hidden state (B, H) at each row's last token (the
        LM head is applied later, only to the rows that sample: ``_logits``)."""
        counts = [len(f) for f in feeds]
        q = max(1, max(counts))
        ids = torch.full((len(feeds), q), self.pad_id, dtype=torch.long)  # (B, Q)
        for i, f in enumerate(feeds):
            ids[i, : len(f)] = torch.tensor(f, dtype=torch.long)
        positions, mask = kv.prepare(slots, counts)
        with engine_attention(self.body):
            out = self.body(input_ids=ids.to(kv.device), position_ids=positions,
                            attention_mask=mask, use_cache=True, **{self.cache_kw: kv})  # fmt: skip
        kv.advance(slots, counts)
        self.stats["forwards"] += 1
        hidden = out.last_hidden_state  # (B, Q, H)
        if q == 1:
            return hidden[:, 0]  # (B, H)
        last = torch.tensor([max(c, 1) - 1 for c in counts], device=hidden.device)
        return hidden[torch.arange(len(feeds), device=hidden.device), last]  # (B, H)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits (B, V) in fp32 from last hidden states (B, H)."""
        return self.head(hidden).float()
