"""Subgoals of a task from the reference solver's knowledge, and the reward of a worker's subgoal.

``subgoal_groups``: the expected calls (``instance.expected_calls``) grouped into subgoals: a
call whose arguments the request gives (a city, a person: ``plan.known_arguments``) opens a
subgoal; a call with none joins the previous one (it needs that one's results).
``subgoal_text`` is the reference subgoal line: ``get_weather(city=Paris)``, calls of a group
joined by `` then ``.

``subgoal_target``: the group a subgoal line names, as decomposition accuracy decides it: the
group's first call, by its tool and every argument word the request gives (the words alone
count for less), a group not done yet first. Its subgoal *type* is that call's tool
(``other`` when the line names no group).

``subgoal_reward``: what a worker earned on its subgoal, explained by layers:

- ``calls``: the share of the target group's calls the worker made with a successful result
  (a subgoal of type ``other``: the share of the worker's own calls that succeeded);
- ``format``: the mean format score of the worker's tool turns (the env's per-turn layer);
- ``finished``: 1.0 when the worker closed the subgoal with a reply (not its turn limit);
- ``repeat``: repeated calls in its turns (the env's per-turn count; a penalty).

``total = sum(SUBGOAL_WEIGHTS[k] * layers[k])``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from agentrl.planning.plan import known_arguments
from agentrl.rewards.layers import call_key
from agentrl.types import RewardBreakdown, ToolCall

SUBGOAL_WEIGHTS: dict[str, float] = {"calls": 1.0, "format": 0.1, "finished": 0.1, "repeat": -0.1}
OTHER = "other"


def subgoal_groups(expected: Sequence[ToolCall], prompt: str) -> list[list[ToolCall]]:
    """The expected calls in subgoals (module docstring); a first call with no known
    argument opens the first subgoal all the same."""
    groups: list[list[ToolCall]] = []
    for call in expected:
        if groups and not known_arguments(call, prompt):
            groups[-1].append(call)
        else:
            groups.append([call])
    return groups


def _call_line(call: ToolCall, prompt: str) -> str:
    shown = []
    for key, words in known_arguments(call, prompt).items():
        value = call.arguments[key]
        shown.append(
            f"{key}={'[' + ', '.join(words) + ']' if isinstance(value, list | tuple) else words[0]}"
        )
    return f"{call.name}({', '.join(shown)})"


def subgoal_text(group: Sequence[ToolCall], prompt: str) -> str:
    """The reference subgoal line of a group: ``get_weather(city=Paris)``."""
    return " then ".join(_call_line(c, prompt) for c in group)


def _match(line: str, group: Sequence[ToolCall], prompt: str) -> int:
    """How well a subgoal line names ``group`` (its first call): 2 = its tool and every
    argument word the request gives; 1 = the words alone (or the tool, for a call with no
    such words); 0 = not named (case-insensitive)."""
    low, head = line.casefold(), group[0]
    words = [w for ws in known_arguments(head, prompt).values() for w in ws]
    named, has_words = head.name.casefold() in low, all(w.casefold() in low for w in words)
    if words:
        return 0 if not has_words else 2 if named else 1
    return 2 if named else 0


def subgoal_target(line: str, groups: Sequence[Sequence[ToolCall]], prompt: str,
                   done: Collection[int] = ()) -> int | None:  # fmt: skip
    """The group ``line`` names best (``_match``): the first of the best matches among the
    groups not ``done`` yet, else among all; None when it names none."""
    for pool in ([i for i in range(len(groups)) if i not in done], range(len(groups))):
        scores = [(_match(line, groups[i], prompt), -i) for i in pool]
        best = max(scores, default=(0, 0))
        if best[0] > 0:
            return -best[1]
    return None


def subgoal_type(target: int | None, groups: Sequence[Sequence[ToolCall]]) -> str:
    """A worker segment's type for its baseline: the target group's first tool, or ``other``."""
    return OTHER if target is None else groups[target][0].name


def subgoal_reward(
    targets: Sequence[ToolCall] | None,
    calls: Sequence[dict[str, Any]],  # the worker's call records: name, arguments, ok
    per_turn: Sequence[dict[str, float]],  # the env's per-turn scores of the worker's tool turns
    finished: bool,
) -> RewardBreakdown:
    """The reward of one worker segment (module docstring); ``targets`` None: type ``other``."""
    done = {call_key(ToolCall(c["name"], c["arguments"])) for c in calls if c["ok"]}
    if targets:
        share = sum(call_key(t) in done for t in targets) / len(targets)
    else:
        share = sum(bool(c["ok"]) for c in calls) / len(calls) if calls else 0.0
    formats = [t["format"] for t in per_turn]
    layers = {
        "calls": share,
        "format": sum(formats) / len(formats) if formats else 0.0,
        "finished": 1.0 if finished else 0.0,
        "repeat": float(sum(t.get("repeat", 0.0) for t in per_turn)),
    }
    return RewardBreakdown(layers=layers, weights=dict(SUBGOAL_WEIGHTS))
