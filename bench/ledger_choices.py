"""Why ledger episodes fail: the choice of account, the notes, the loops, read from a run's
evaluation records (``eval_before.jsonl`` / ``eval_after.jsonl``).

Each episode's instance is rebuilt from its seed and level, so its targets (the
accounts with the largest opening balances) are known. Per episode: were all balances read,
which accounts got a posting, whether the posting went to a target, and, for a policy that
writes running notes ("Largest so far: A262 8840, ..."; ``task.env_kwargs.running_top``),
whether each note was true to the balances read so far and whether the posting followed the
last note. Also how episodes ended and how many turns they took. Not a test: prints figures.

    python bench/ledger_choices.py runs/ledger_l1_notes_ws
    python bench/ledger_choices.py runs/ledger_l1_notes_ws --file eval_after.jsonl --json out.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentrl.envs.tasks.ledger import LedgerFamily
from agentrl.envs.tasks.ledger_audit import episode_facts, summarize
from agentrl.monitor.metrics import read_jsonl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, help="a ledger run directory")
    ap.add_argument("--file", default="eval_before.jsonl", help="the evaluation records to read")
    ap.add_argument("--json", type=Path, help="also write the summary here")
    args = ap.parse_args()
    path = args.run_dir / args.file
    if not path.is_file():
        ap.error(f"no evaluation records at {path}")
    records = read_jsonl(path)
    family = LedgerFamily(recall=any("recall" in r["task_id"] for r in records))
    facts = [episode_facts(r, family) for r in records]
    summary = summarize(facts)
    for key, value in summary.items():
        print(f"{key:>20}: {value}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "episodes": facts}, indent=1))


if __name__ == "__main__":
    main()
