"""``EpisodeMemory``: the prompt of the next turn of a long episode, hot / warm / cold.

At the start of turn ``t`` (``t`` assistant turns played) the prompt shows the episode's
head (system prompt and task), then a memory note (``render.render_note``), then the last
``hot_turns`` turns verbatim. The ``warm_turns`` turns before those are warm records
(``records.compress_turn``); older turns are in the cold store (``lsh.ColdStore``) and the
``cold_top_k`` most similar to the hot turns are recalled into the note.

A prompt rewrite starts a new token-exact segment (the rollout's job), so the memory asks
for one only when the verbatim window is full: ``needs_rewrite(t)`` is true when the current
context would show more than ``hot_turns + rewrite_every - 1`` turns verbatim. Until then
turns are appended as deltas and the segment keeps its KV cache.
"""

from __future__ import annotations

from collections.abc import Callable

from agentrl.config.memory import MemoryConfig
from agentrl.memory.lsh import ColdStore
from agentrl.memory.records import WarmRecord, compress_turn
from agentrl.memory.render import render_note
from agentrl.memory.turns import split_turns, turn_text
from agentrl.types import Message

NOTE_ROLE = "user"


class EpisodeMemory:
    """Memory of one episode; ``count_tokens(text)`` counts the policy's tokens."""

    def __init__(self, cfg: MemoryConfig, count_tokens: Callable[[str], int]) -> None:
        self.cfg = cfg
        self.count_tokens = count_tokens
        self.cold = ColdStore(cfg.num_perm)
        self.first_verbatim = 0  # the first turn the current context shows verbatim
        self._records: dict[int, WarmRecord] = {}
        self.last_note = ""
        self.last_recalled: list[int] = []

    def needs_rewrite(self, turns_played: int) -> bool:
        """Whether the next turn's context would show too many turns verbatim."""
        window = turns_played - self.first_verbatim
        return window > self.cfg.hot_turns + self.cfg.rewrite_every - 1

    def record(self, index: int, turn: list[Message]) -> WarmRecord:
        """Turn ``index``'s warm record (computed once)."""
        if index not in self._records:
            self._records[index] = compress_turn(index, turn)
        return self._records[index]

    def view(self, messages: list[Message]) -> list[Message]:
        """The next turn's prompt messages for the dialogue ``messages`` (``env.messages``);
        moves the verbatim window to the last ``hot_turns`` turns."""
        head, turns = split_turns(messages)
        self.first_verbatim = max(0, len(turns) - self.cfg.hot_turns)
        first_warm = max(0, self.first_verbatim - self.cfg.warm_turns)
        for i in range(first_warm):  # a turn enters the cold store once, when it leaves warm
            self.cold.add(self.record(i, turns[i]), turn_text(turns[i]))
        warm = [self.record(i, turns[i]) for i in range(first_warm, self.first_verbatim)]
        hot = turns[self.first_verbatim :]
        state = "\n".join(turn_text(t) for t in hot)
        recalled = [r for r, _ in self.cold.recall(state, self.cfg.cold_top_k)]
        self.last_recalled = [r.turn for r in recalled]
        self.last_note = render_note(warm, recalled, self.count_tokens, self.cfg.budget_tokens)
        note = [{"role": NOTE_ROLE, "content": self.last_note}] if self.last_note else []
        return [dict(m) for m in head] + note + [dict(m) for t in hot for m in t]
