"""The memory note: warm lines and recalled cold turns, fitted to a token budget.

Lines are chosen by priority and shown in turn order, recalled cold turns first::

    [memory]
    recalled:
    t1 get_weather(city=Oslo) ok: temperature_c=-3 condition=snowy
    recent:
    t6 get_weather(city=Lima) ok: temperature_c=20 condition=sunny
    t7 ...

Priority: the ``RECENT_FIRST`` newest warm lines, then the recalled cold turns (best match
first), then the other warm lines, newest first. A line is kept when the whole note, counted
with the policy's tokenizer, stays within ``budget`` tokens; one that does not fit is
skipped (a shorter one after it may still fit). The chat template's wrapping of the note's
message (a few tokens) is not counted.
"""

from __future__ import annotations

from collections.abc import Callable

from agentrl.memory.records import WarmRecord

RECENT_FIRST = 2
HEADER = "[memory]"


def _text(recalled: list[str], recent: list[str]) -> str:
    parts = [HEADER]
    if recalled:
        parts += ["recalled:", *recalled]
    if recent:
        parts += ["recent:", *recent]
    return "\n".join(parts)


def render_note(
    warm: list[WarmRecord],
    recalled: list[WarmRecord],
    count_tokens: Callable[[str], int],
    budget: int,
) -> str:
    """The note for ``warm`` records (oldest first) and ``recalled`` cold ones (best first)
    within ``budget`` tokens ("" when nothing fits)."""
    newest = list(reversed(warm))
    order = newest[:RECENT_FIRST] + recalled + newest[RECENT_FIRST:]
    cold = {r.turn for r in recalled}
    shown: dict[int, str] = {}

    def text(lines: dict[int, str]) -> str:
        turns = sorted(lines)
        return _text([lines[t] for t in turns if t in cold],
                     [lines[t] for t in turns if t not in cold])  # fmt: skip

    for rec in order:
        trial = {**shown, rec.turn: rec.line()}
        if count_tokens(text(trial)) <= budget:
            shown = trial
    return text(shown) if shown else ""
