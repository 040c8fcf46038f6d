"""Why meeting episodes fail: the notes, the time zone of the calendars, the tries, the stop at
the free start and the invitation, read from an evaluation's records
(``agentrl eval ... --out DIR`` writes ``DIR/transcripts.jsonl``; a training run writes
``eval_before.jsonl`` / ``eval_after.jsonl``).

Each episode's world is rebuilt from its seed and level (``agentrl.envs.tasks.meeting_audit``).
Per episode: whether its first turn ran out of tokens before it ended, whether a turn repeated
the one before it word for word, whether its call turns opened with notes, whether the first
calendar was asked in the organizer's time zone, which starts ``find_conflicts`` tried (in that
zone, in the probing order), whether a free one was found and the trying stopped there, what
the next call was after a try that was not free, and whether an email was drafted. Not a
test: prints figures.

    python bench/meeting_steps.py runs/meeting_probe2_ws/eval_start/transcripts.jsonl
    python bench/meeting_steps.py runs/meeting_probe_ws/eval_start/transcripts.jsonl --json out.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentrl.envs.tasks.meeting import MeetingFamily
from agentrl.envs.tasks.meeting_audit import episode_facts, summarize
from agentrl.monitor.metrics import read_jsonl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", type=Path, help="an evaluation's JSONL records")
    ap.add_argument("--json", type=Path, help="also write the summary and episodes here")
    args = ap.parse_args()
    path = args.records
    if not path.is_file():
        ap.error(f"no evaluation records at {path}")
    records = read_jsonl(path)
    family = MeetingFamily(probe_slots=True)  # the worlds are the same in both modes
    facts = [episode_facts(r, family) for r in records]
    summary = summarize(facts)
    for key, value in summary.items():
        print(f"{key:>24}: {value}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "episodes": facts}, indent=1))


if __name__ == "__main__":
    main()
