"""``agentrl doctor``'s checks over a run's recent episodes (``trajectories.jsonl``): format
errors, repeated identical calls, episodes cut at the token budget, one tool always chosen."""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentrl.monitor.findings import Finding, examples, thirds, window
from agentrl.monitor.rundata import RunData


def first_unparsed_turn(episode: dict[str, Any]) -> int | None:
    """The first assistant turn whose format layer is below 1 (an unparsable call)."""
    turns = (episode.get("reward") or {}).get("per_turn") or []
    return next((i for i, t in enumerate(turns) if t.get("format", 1.0) < 1.0), None)


def check_format_errors(data: RunData) -> Finding | None:
    eps = data.episodes
    bad = [(e, first_unparsed_turn(e)) for e in eps if (e.get("info") or {}).get("parse_errors")]
    fmt = data.series("reward/format")
    low_format = bool(fmt) and thirds(fmt)[1] < 0.7
    if not eps or (len(bad) / len(eps) < 0.3 and not low_format):
        return None
    demos = int(data.setting("train.warmstart_demos", 64))
    title = f"{len(bad)} of {len(eps)} recent episodes have an unparsable tool call"
    if low_format:
        title += (
            f"; the format layer averages {thirds(fmt)[1]:.2f} over the last steps "
            "(0 for an unparsable call, and for no call where the task needs one)"
        )
    return Finding(
        "format_errors",
        "warning",
        title,
        {
            "fraction": round(len(bad) / len(eps), 3),
            "examples": examples(bad),
            **({"format": window(data, "reward/format")} if fmt else {}),
        },
        [f"train.warmstart_demos={max(demos * 2, 64)}", "train.warmstart_epochs=4"],
    )


def first_repeat(episode: dict[str, Any]) -> int | None:
    """The index of the first call that repeats an earlier identical call (name + arguments)
    that had succeeded; a retry after an error is not a repeat."""
    answered = set()
    for i, call in enumerate(episode.get("tool_calls") or []):
        key = (call.get("name"), repr(sorted((call.get("arguments") or {}).items())))
        if key in answered:
            return i
        if call.get("ok", True):
            answered.add(key)
    return None


def check_repeated_calls(data: RunData) -> Finding | None:
    eps = data.episodes
    hits = [(e, i) for e in eps if (i := first_repeat(e)) is not None]
    weight = float(data.setting("reward.repeat", -0.1))
    if weight <= 0 and (not eps or len(hits) / len(eps) < 0.3):
        return None
    fix = [f"reward.repeat={min(weight, 0.0) - 0.3:.2g}", f"reward.reask={-0.3:.2g}"]
    why = " and reward.repeat is positive: a repeat is paid, not penalized" if weight > 0 else ""
    return Finding(
        "repeated_calls",
        "error" if weight > 0 else "warning",
        f"{len(hits)} of {len(eps)} recent episodes repeat an identical call{why}",
        {
            "fraction": round(len(hits) / max(len(eps), 1), 3),
            "examples": examples(hits, "call"),
            "reward.repeat": weight,
        },
        fix,
    )


def check_length(data: RunData) -> Finding | None:
    """Episodes cut at the token budget: information lost in long trajectories."""
    eps = data.episodes
    cut = [(e, len(e.get("tool_calls") or [])) for e in eps if e.get("termination") == "length"]
    if not eps or len(cut) / len(eps) < 0.2:
        return None
    budget = int(data.setting("rollout.max_total_tokens", 1024))
    return Finding(
        "lost_information",
        "warning",
        f"{len(cut)} of {len(eps)} recent episodes hit rollout.max_total_tokens "
        f"({budget}): the end of the history is lost",
        {"fraction": round(len(cut) / len(eps), 3), "examples": examples(cut, "calls")},
        [f"rollout.max_total_tokens={budget * 2}"],
    )


def check_one_tool(data: RunData) -> Finding | None:
    calls = [c.get("name") for e in data.episodes for c in (e.get("tool_calls") or [])]
    choice = data.series("reward/tool_choice")
    if len(calls) < 20 or not choice or thirds(choice)[1] > 0.7:
        return None
    name, count = Counter(calls).most_common(1)[0]
    if count / len(calls) < 0.9:
        return None
    demos = int(data.setting("train.warmstart_demos", 64))
    return Finding(
        "one_tool",
        "warning",
        f"{name} takes {count} of {len(calls)} recent calls while the tool-choice "
        f"layer is {thirds(choice)[1]:.2f}: one tool chosen always",
        {
            "tool": name,
            "share": round(count / len(calls), 3),
            "tool_choice": window(data, "reward/tool_choice"),
        },
        [f"train.warmstart_demos={max(demos * 2, 64)}", "train.warmstart_levels=[1,2,3]"],
    )
