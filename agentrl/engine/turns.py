"""The session interface over any batch generator: ``generate(prompts, ...) -> [Sample]``.

``open_session`` gives the rollout one way to drive every generator. An ``Engine`` brings its
own ``DecodeSession`` (cross-turn KV cache, continuous batching). Anything else with a batch
``generate`` (a scripted test policy, an HTTP policy, ``HFGenerator``) is wrapped in
``TurnSession``: each ``step`` sends every sequence that is in a turn, whole, to one
``generate`` call, turn by turn, as the rollout did before the engine.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from agentrl.policy.generate import Sample

#: a turn's seed: the sequence's seed plus this times the turns it has had
TURN_SEED_STRIDE = 7919


class TurnSession:
    """One ``generate`` call per step for all sequences in a turn (no cache across turns).

    A generator whose ``accepts_seeds`` is true gets each sequence's seed for the turn
    (``generate(..., seeds=)``), so what a sequence samples does not depend on which others
    share its call or on the global RNG (as in an ``Engine`` session); others draw their own.
    """

    def __init__(self, generator: Any, *, temperature: float, top_p: float, greedy: bool):
        self.generator = generator
        self.options = {"temperature": temperature, "top_p": top_p, "greedy": greedy}
        self.ids: dict[Hashable, list[int]] = {}
        self.budget: dict[Hashable, int] = {}
        self.in_turn: list[Hashable] = []
        self.seeds: dict[Hashable, int | None] = {}  # the sequence's seed for its next turn
        self.pass_seeds = bool(getattr(generator, "accepts_seeds", False))

    def set_prefix(self, ids: list[int]) -> None:
        """Nothing to do: a batch generator finds shared prefixes itself, if it can."""

    def add(self, key: Hashable, prompt: list[int], max_new: int, seed: int | None,
            constraint: Any = None) -> None:  # fmt: skip
        if constraint is not None:
            name = type(self.generator).__name__
            raise ValueError("constrained decoding masks logits inside agentrl's engine; "
                             f"{name} only has a batch generate")  # fmt: skip
        self.ids[key], self.budget[key], self.seeds[key] = list(prompt), max_new, seed
        self.in_turn.append(key)

    def extend(self, key: Hashable, delta: list[int], max_new: int) -> None:
        self.ids[key].extend(delta)
        self.budget[key] = max_new
        self.in_turn.append(key)

    def release(self, key: Hashable) -> None:
        self.ids.pop(key, None)
        self.seeds.pop(key, None)
        self.in_turn = [k for k in self.in_turn if k != key]

    @property
    def busy(self) -> bool:
        return bool(self.in_turn)

    def step(self) -> list[tuple[Hashable, Sample]]:
        keys, self.in_turn = self.in_turn, []
        n_new = max(1, max(self.budget[k] for k in keys))
        options = dict(self.options)
        if self.pass_seeds and all(self.seeds.get(k) is not None for k in keys):
            options["seeds"] = [self.seeds[k] for k in keys]
            for k in keys:
                self.seeds[k] += TURN_SEED_STRIDE
        samples = self.generator.generate([self.ids[k] for k in keys], max_new_tokens=n_new,
                                          **options)  # fmt: skip
        for k, s in zip(keys, samples, strict=True):
            self.ids[k].extend(s.ids)
        return list(zip(keys, samples, strict=True))


def open_session(generator: Any, n_sequences: int, capacity: int, *, temperature: float = 1.0,
                 top_p: float = 1.0, greedy: bool = False,
                 adapter: str | None = None) -> Any:  # fmt: skip
    """The generator's own session when it has one (``supports_sessions``), else a
    ``TurnSession`` around its batch ``generate``. ``adapter``: decode with that role adapter
    (an engine session only)."""
    options = {"temperature": temperature, "top_p": top_p, "greedy": greedy}
    if getattr(generator, "supports_sessions", False):
        extra = {} if adapter is None else {"adapter": adapter}
        return generator.session(n_sequences, capacity, **options, **extra)
    if adapter is not None:
        raise ValueError(f"role adapters decode with agentrl's engine; "
                         f"{type(generator).__name__} has no sessions")  # fmt: skip
    return TurnSession(generator, **options)
