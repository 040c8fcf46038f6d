"""What a ledger episode chose, noted and posted, read back from its evaluation record: the
analysis behind ``bench/ledger_choices.py`` (why ledger episodes fail).

An episode's instance is rebuilt from its level and the seed in its ``info``, so its targets (the
accounts with the largest opening balances) are known. ``episode_facts``: were all balances
read, which accounts got a posting and whether they are the targets, and for a policy that
writes running notes ("Largest so far: A262 8840, ..."; the family's ``running_top``) whether
each note was true to the balances read before it and whether the postings followed the last
note. ``summarize`` counts them over episodes.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from typing import Any

from agentrl.envs.tasks.ledger import LedgerFamily

NOTE_RE = re.compile(r"Largest so far:\s*([^\n]*)")
ENTRY_RE = re.compile(r"(A\d+)\s+(-?\d+)")


def note_accounts(text: str) -> list[str] | None:
    """The account ids a running note lists, in order; None where the text has no note."""
    match = NOTE_RE.search(text or "")
    return [a for a, _ in ENTRY_RE.findall(match.group(1))] if match else None


def episode_facts(record: dict[str, Any], family: LedgerFamily) -> dict[str, Any]:
    """One evaluation record -> what its episode chose, noted and posted (module docstring)."""
    info = record["info"]
    instance = family.sample(random.Random(info["seed"]), record["level"])
    targets = instance.data["targets"]
    k = len(targets)
    read: dict[str, int] = {}  # account -> opening balance, in the order read
    notes, posted, note_at_post, last_note = [], [], None, None
    calls = iter(record.get("tool_calls") or info.get("tool_calls", []))
    for msg in record["messages"]:
        if msg["role"] == "assistant":
            listed = note_accounts(msg.get("content", ""))
            if listed is not None:
                truth = [a for a, _ in sorted(read.items(), key=lambda kv: -kv[1])[:k]]
                notes.append(listed == truth)
                last_note = listed
            for _ in msg.get("tool_calls") or []:  # one call record each, in order
                rec = next(calls, None)
                if rec is None or not rec["ok"]:
                    continue
                if rec["name"] == "get_balance":
                    body = json.loads(rec["content"])
                    read[body["account"]] = body["opening_balance"]
                elif rec["name"] == "record":
                    posted.append(rec["arguments"].get("account"))
                    if note_at_post is None and notes:
                        note_at_post = last_note
    every = {a["id"] for a in instance.data["accounts"]}
    return {
        "success": bool(record["success"]),
        "termination": record["termination"],
        "turns": sum(m["role"] == "assistant" for m in record["messages"]),
        "read_all": set(read) >= every,
        "posted": posted,
        "posted_right": bool(posted) and set(posted) == set(targets),
        "with_notes": bool(notes),
        "notes": len(notes),
        "notes_true": sum(notes),
        "post_followed_note": note_at_post is not None and set(posted[:k]) <= set(note_at_post),
        "note_at_post_right": note_at_post is not None and note_at_post[:k] == targets,
    }


COUNTED = ("success", "read_all", "posted", "posted_right", "with_notes", "post_followed_note",
           "note_at_post_right")  # fmt: skip


def summarize(facts: list[dict[str, Any]]) -> dict[str, Any]:
    """Episodes counted for each fact of ``COUNTED``, the share of notes that were true, the
    mean number of turns and how the episodes ended."""
    count = Counter()
    for f in facts:
        count.update(key for key in COUNTED if f[key])
    notes = sum(f["notes"] for f in facts)
    true_notes = sum(f["notes_true"] for f in facts)
    return {
        "episodes": len(facts),
        **{key: count[key] for key in COUNTED},
        "notes": notes,
        "notes_true_share": round(true_notes / notes, 3) if notes else None,
        "mean_turns": round(sum(f["turns"] for f in facts) / max(len(facts), 1), 1),
        "termination": dict(Counter(f["termination"] for f in facts)),
    }
