"""Reward layers: pure functions scoring one assistant turn or one episode (MISSION C).

Layers, weights rising in this order (DESIGN contract 4): ``format`` (the turn parsed)
< ``tool_choice`` (the right tools) < ``arguments`` (the right arguments) < ``completion``
(the verifier accepted the answer); ``repeat`` is a penalty (a count, negative weight).
Every function here is pure: same inputs, same score, no state.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentrl.types import ParsedAction, ToolCall

#: Default weights; a weight of 0 keeps a layer as a logged metric that adds nothing.
DEFAULT_WEIGHTS: dict[str, float] = {
    "format": 0.1,
    "tool_choice": 0.2,
    "arguments": 0.3,
    "completion": 1.0,
    "repeat": -0.1,
}
LAYERS: tuple[str, ...] = tuple(DEFAULT_WEIGHTS)
#: Default weights of the task families' process layers (``envs/tasks/shaped.py``):
#: ``progress`` (fraction of the task's milestones reached) and ``reask`` (a count of calls
#: that fetched information the dialogue already held; a penalty); ``plan`` (decomposition
#: accuracy of the episode's plan, ``agentrl.planning.plan``: plan-and-execute mode only).
PROCESS_WEIGHTS: dict[str, float] = {"progress": 0.3, "reask": -0.1, "plan": 0.2}
PROCESS_LAYERS: tuple[str, ...] = tuple(PROCESS_WEIGHTS)


def resolve_weights(weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """Every layer's default (``LAYERS``, then ``PROCESS_LAYERS``) overridden by ``weights``.

    An unknown key raises ``ValueError`` naming the allowed ones.
    """
    out = {**DEFAULT_WEIGHTS, **PROCESS_WEIGHTS}
    for key, value in (weights or {}).items():
        if key not in out:
            raise ValueError(f"unknown reward weight {key!r}; allowed: {', '.join(out)}")
        out[key] = float(value)
    return out


def normalize_value(value: Any) -> Any:
    """Arguments compared loosely: strings stripped and casefolded, containers recursively.

    >>> normalize_value({"city": "  Paris "})
    {'city': 'paris'}
    """
    if isinstance(value, str):
        return value.strip().casefold()
    if isinstance(value, Mapping):
        return {str(k): normalize_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize_value(v) for v in value]
    return value


def call_key(call: ToolCall) -> str:
    """A hashable identity of a call: its name and normalized arguments (key order ignored)."""
    args = normalize_value(call.arguments)
    return call.name + ":" + json.dumps(args, sort_keys=True, default=str)


def format_score(parsed: ParsedAction) -> float:
    """1.0 if the turn parsed cleanly (valid calls or a non-empty plain answer), else 0.0.

    Any parse error scores 0 for the whole turn; so does an empty reply.
    """
    if parsed.errors:
        return 0.0
    if not parsed.tool_calls and not parsed.text.strip():
        return 0.0
    return 1.0


def tool_choice_score(calls: Sequence[ToolCall], expected_names: Iterable[str]) -> float | None:
    """Fraction of the turn's calls whose tool name is one the task needs; None if no calls."""
    if not calls:
        return None
    names = set(expected_names)
    return sum(c.name in names for c in calls) / len(calls)


def turn_argument_score(calls: Sequence[ToolCall], expected: Sequence[ToolCall]) -> float | None:
    """Fraction of the turn's calls that equal some expected call exactly; None if no calls."""
    if not calls:
        return None
    wanted = {call_key(c) for c in expected}
    return sum(call_key(c) in wanted for c in calls) / len(calls)


def argument_coverage(made: Iterable[ToolCall], expected: Sequence[ToolCall]) -> float:
    """Episode score: fraction of expected calls made with exactly matching arguments.

    Strings are compared after strip + casefold. A task with no expected call scores 1.0.
    """
    if not expected:
        return 1.0
    made_keys = {call_key(c) for c in made}
    return sum(call_key(c) in made_keys for c in expected) / len(expected)


def completion_score(success: bool) -> float:
    """1.0 if the task's verifier accepted the final answer, else 0.0."""
    return 1.0 if success else 0.0


def count_repeats(history: Sequence[tuple[ToolCall, bool]]) -> int:
    """Calls that repeat an identical earlier call which had already succeeded.

    ``history`` is every call of the episode in order, with whether its result was a success.
    A retry after an error result is not a repeat; each extra copy after a success counts 1.
    """
    succeeded: set[str] = set()
    repeats = 0
    for call, ok in history:
        key = call_key(call)
        if key in succeeded:
            repeats += 1
        if ok:
            succeeded.add(key)
    return repeats


def mean_or(values: Sequence[float], default: float) -> float:
    """Mean of ``values``, or ``default`` when there are none."""
    return sum(values) / len(values) if values else default
