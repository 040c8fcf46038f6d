"""The cold store: old turns found again by locality-sensitive hashing (MinHash, datasketch).

Each cold turn is indexed by the MinHash signature of its word set (lower-cased words and
numbers of its warm line and raw text); a query is the current state's text (the turns the
prompt shows verbatim). ``MinHashLSHForest`` proposes ``2 * k`` candidates by signature
prefix, which are re-ranked by estimated Jaccard similarity (ties: the more recent turn);
turns that share no word with the state are never recalled. No model is needed.
"""

from __future__ import annotations

import re

from datasketch import MinHash, MinHashLSHForest

from agentrl.memory.records import WarmRecord

_WORD = re.compile(r"[a-z0-9_]+(?:\.[0-9]+)?|-?[0-9]+(?:\.[0-9]+)?")
#: words too common in tool dialogue to tell turns apart
STOP_WORDS = frozenset({"ok", "error", "name", "arguments", "the", "a", "of", "in", "is", "t"})
SEED = 1


def words(text: str) -> set[str]:
    """The word set of ``text``: lower-cased words and numbers, stop words dropped."""
    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS}


def signature(tokens: set[str], num_perm: int) -> MinHash:
    """MinHash signature of a word set (fixed seed: signatures compare across episodes)."""
    m = MinHash(num_perm=num_perm, seed=SEED)
    m.update_batch([t.encode("utf-8") for t in sorted(tokens)])
    return m


class ColdStore:
    """Old turns' warm records, indexed by MinHash LSH; ``recall`` finds the relevant ones."""

    def __init__(self, num_perm: int = 64, trees: int = 8) -> None:
        self.num_perm = num_perm
        self.forest = MinHashLSHForest(num_perm=num_perm, l=trees)
        self.records: dict[int, WarmRecord] = {}
        self.signatures: dict[int, MinHash] = {}
        self._dirty = False

    def __len__(self) -> int:
        return len(self.records)

    def add(self, record: WarmRecord, text: str = "") -> None:
        """Index ``record`` (its line plus ``text``, the turn's raw text) under its turn."""
        if record.turn in self.records:
            return
        tokens = words(record.line() + "\n" + text)
        if not tokens:
            tokens = {f"turn{record.turn}"}
        sig = signature(tokens, self.num_perm)
        self.records[record.turn] = record
        self.signatures[record.turn] = sig
        self.forest.add(record.turn, sig)
        self._dirty = True

    def recall(self, state: str, k: int) -> list[tuple[WarmRecord, float]]:
        """Up to ``k`` records most similar to ``state``, best first, with their estimated
        Jaccard similarity (> 0)."""
        tokens = words(state)
        if k <= 0 or not self.records or not tokens:
            return []
        if self._dirty:
            self.forest.index()
            self._dirty = False
        query = signature(tokens, self.num_perm)
        found = self.forest.query(query, 2 * k)
        scored = [(self.signatures[t].jaccard(query), t) for t in found]
        scored = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], -s[1]))[:k]
        return [(self.records[t], score) for score, t in scored]
