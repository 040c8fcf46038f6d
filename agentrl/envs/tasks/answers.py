"""Reading comparison answers: the evidence-first shape shared by weather and dynamic tools.

An evidence-first answer lists each compared name with its own value, then concludes
("Oslo 12°C, Lima 20°C: Lima is warmer."). A small model compares numbers it has just written
more reliably than it names a winner before any number; the verifiers accept both shapes.
"""

from __future__ import annotations

from collections.abc import Mapping


def evidence_conclusion(
    named: list[tuple[int, str]],
    numbers: list[tuple[int, float]],
    own_values: Mapping[str, set[float]],
) -> str | None:
    """The name an evidence-first answer concludes with, or None if it has another shape.

    ``named``: every mention of a compared name as (position, name), in text order;
    ``numbers``: every number as (position, value); ``own_values``: for each compared name,
    the values its own evidence may read (e.g. °C and °F). The shape: each name's first
    mention is followed by its own value before any other name, and a name is mentioned
    after the last number; the conclusion is the first name mentioned after it (so
    "..: Lima is warmer than Oslo" concludes Lima).
    """
    if not named or not numbers or named[-1][0] < numbers[-1][0]:
        return None
    for name, allowed in own_values.items():
        start = next((pos for pos, n in named if n == name), None)
        if start is None:
            return None
        stop = min([pos for pos, _ in named if pos > start], default=numbers[-1][0] + 1)
        own = [v for pos, v in numbers if start < pos < stop]
        if not own or own[0] not in allowed:
            return None
    last_number = numbers[-1][0]
    return next(n for pos, n in named if pos > last_number)
