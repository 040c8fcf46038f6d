"""What a meeting episode did on the way to its invitation, read back from its evaluation record:
the analysis behind ``bench/meeting_steps.py`` (why meeting episodes fail).

An episode's world is rebuilt from its level and the seed in its ``info`` (the task id must
match), so the organizer's time zone and the order a probing solver tries starts in
(``probe_starts``) are known. ``episode_facts``: did the first turn run out of tokens before
it ended (no whole turn), did a turn repeat the one before it word for word, did the turns open
with notes, were the calendars asked in the organizer's zone, which starts were tried and in
what zone, was a free one found and the trying stopped there, what followed a try that was not
free, was an email drafted. ``summarize`` counts them over episodes.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

from agentrl.envs.tasks.meeting import MeetingFamily, probe_starts


def _results(record: dict[str, Any]) -> list[tuple[dict, Any]]:
    """``(call record, decoded result)`` for every call, in order; the result is None for a
    call that failed (a bad argument, an unknown tool) or did not return JSON."""
    out = []
    for rec in record.get("tool_calls") or []:
        try:
            out.append((rec, json.loads(rec["content"]) if rec["ok"] else None))
        except (TypeError, json.JSONDecodeError):
            out.append((rec, None))
    return out


def episode_facts(record: dict[str, Any], family: MeetingFamily) -> dict[str, Any]:
    """One evaluation record -> what its episode noted, asked, tried and drafted (module doc)."""
    instance = family.sample(random.Random(record["info"]["seed"]), record["level"])
    if instance.task_id != record["task_id"]:
        raise ValueError(f"rebuilt {instance.task_id}, the record is {record['task_id']}")
    world = instance.data["world"]
    org_tz = world["people"][world["organizer"]]["timezone"]
    turns = [m for m in record["messages"] if m["role"] == "assistant"]
    call_turns = [m for m in turns if m.get("tool_calls")]
    calls = _results(record)
    busy = [r for r, _ in calls if r["name"] == "get_busy"]
    tries = [(r, body) for r, body in calls if r["name"] == "find_conflicts"]
    starts = [str(r["arguments"].get("start")) for r, _ in tries]
    free_at = next((i for i, (_, b) in enumerate(tries) if isinstance(b, dict) and b.get("free")),
                   None)  # fmt: skip
    names = [r["name"] for r, _ in calls]
    after_not_free = Counter()
    for i, (rec, body) in enumerate(calls):
        if rec["name"] == "find_conflicts" and isinstance(body, dict) and not body.get("free"):
            after_not_free[names[i + 1] if i + 1 < len(names) else "(end)"] += 1
    order = probe_starts(world)
    return {
        "success": bool(record["success"]),
        "termination": record["termination"],
        "turns": len(turns),
        "ran_on_first_turn": not turns,  # the first turn hit the per-turn token limit
        "repeated_turn": any(_same_turn(a, b) for a, b in zip(turns, turns[1:], strict=False)),
        "notes": sum(bool((m.get("content") or "").strip()) for m in call_turns),
        "call_turns": len(call_turns),
        "busy_in_organizer_zone": bool(busy) and busy[0]["arguments"].get("timezone") == org_tz,
        "tries": len(tries),
        "tries_in_organizer_zone": sum(r["arguments"].get("timezone") == org_tz for r, _ in tries),
        "tries_in_probe_order": bool(starts) and starts == order[: len(starts)],
        "found_free": free_at is not None,
        "stopped_at_free": free_at is not None and free_at == len(tries) - 1,
        "after_not_free": dict(after_not_free),
        "drafted": any(r["name"] == "draft_email" and r["ok"] for r, _ in calls),
    }


def _same_turn(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two assistant turns with the same text and the same calls."""
    return (a.get("content") or "", a.get("tool_calls")) == (
        b.get("content") or "",
        b.get("tool_calls"),
    )


COUNTED = ("success", "ran_on_first_turn", "repeated_turn", "busy_in_organizer_zone",
           "tries_in_probe_order", "found_free", "stopped_at_free", "drafted")  # fmt: skip


def summarize(facts: list[dict[str, Any]]) -> dict[str, Any]:
    """Episodes counted for each fact of ``COUNTED``; episodes whose every call turn opened
    with a note; notes, tries and what followed a try that was not free, summed; mean turns;
    how the episodes ended."""
    count = Counter()
    for f in facts:
        count.update(key for key in COUNTED if f[key])
    after = Counter()
    for f in facts:
        after.update(f["after_not_free"])
    return {
        "episodes": len(facts),
        **{key: count[key] for key in COUNTED},
        "with_notes": sum(f["notes"] > 0 for f in facts),
        "notes_on_every_call_turn": sum(
            f["call_turns"] > 0 and f["notes"] == f["call_turns"] for f in facts
        ),
        "tried": sum(f["tries"] > 0 for f in facts),
        "tries": sum(f["tries"] for f in facts),
        "tries_in_organizer_zone": sum(f["tries_in_organizer_zone"] for f in facts),
        "after_not_free": dict(after.most_common()),
        "mean_turns": round(sum(f["turns"] for f in facts) / max(len(facts), 1), 1),
        "termination": dict(Counter(f["termination"] for f in facts)),
    }
