"""What live human feedback adds to an RL step (``train.feedback``), on the tiny model. A
benchmark, not a test.

Two runs with the same seeds: one plain, one with the feedback endpoint on
(``train.feedback.port``) and a scripted rater that, after each step, posts a rating for every
episode of that step over HTTP (+1 for answers shorter than their group's median, -1 for
longer ones). Figures: seconds per step of both runs (median over steps 1..N-1; the step-0
warm-up left out), ``time/feedback_s`` (reading the ratings and building the replayed groups),
the replayed episodes per step (they are trained too: that is most of the added time), and
``feedback/latency_s``, from a rating's POST to the update that used it.

    python bench/feedback_latency.py --json feedback_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import tempfile
from pathlib import Path
from typing import Any

import httpx

from agentrl.config import build_config
from agentrl.monitor.metrics import read_jsonl
from agentrl.train import train


def rate_step(url: str, run: Path, step: int) -> int:
    """Post the scripted ratings of step ``step``'s episodes; returns how many were posted."""
    groups: dict[int, list[tuple[str, int]]] = {}
    for line in (run / "trajectories.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["step"] == step:
            text = "".join(s["text"] for s in r["spans"] if s["mask"])
            groups.setdefault(r["group_id"], []).append((r["episode_id"], len(text)))
    posted = 0
    for group in groups.values():
        median = statistics.median(n for _, n in group)
        for eid, n in group:
            if n != median:
                rating = 1.0 if n < median else -1.0
                httpx.post(f"{url}/feedback", json={"episode_id": eid, "rating": rating})
                posted += 1
    return posted


def run_once(args: argparse.Namespace, run: Path, feedback: bool) -> list[dict[str, Any]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    overrides = [f"model.name={args.model}", f"train.run_dir={run}", f"train.steps={args.steps}",
                 "train.eval_episodes=0", "train.warmstart_demos=0", "task.max_turns=1",
                 f"rollout.group_size={args.group_size}", f"rollout.groups_per_step={args.groups}",
                 "rollout.max_new_tokens=12", "rollout.max_total_tokens=600",
                 "train.save_model=false", "train.checkpoint_every=0",
                 f"train.feedback.enabled={str(feedback).lower()}",
                 f"train.feedback.port={port}"]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    on_step = (lambda n: rate_step(url, run, n - 1)) if feedback else None
    train(build_config({}, overrides), progress=False, on_step=on_step)
    return read_jsonl(run / "metrics.jsonl")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="agentrl/tiny")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain = run_once(args, Path(tmp) / "plain", False)
        rated = run_once(args, Path(tmp) / "rated", True)
    later = rated[1:]  # step 0 has nothing rated yet

    def median_step(lines: list[dict[str, Any]]) -> float:
        return statistics.median(m["time/step_s"] for m in lines[1:])

    out = {
        "model": args.model,
        "steps": args.steps,
        "episodes_per_step": args.group_size * args.groups,
        "plain_s_per_step": median_step(plain),
        "feedback_s_per_step": median_step(rated),
        "feedback_read_s": statistics.mean(m["time/feedback_s"] for m in later),
        "replayed_episodes_per_step": statistics.mean(
            m["feedback/replayed_episodes"] for m in later
        ),
        "ratings_applied": sum(m["feedback/applied"] for m in rated),
        "rating_to_update_s": statistics.mean(m["feedback/latency_s"] for m in later),
    }
    out["added_s_per_step"] = out["feedback_s_per_step"] - out["plain_s_per_step"]
    out["load_average_1min"] = os.getloadavg()[0]  # a shared machine: how busy it was
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
