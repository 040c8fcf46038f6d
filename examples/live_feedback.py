"""Live human feedback during training (``train.feedback``): while the run goes, a rater reads
the newest episodes from the run's feedback endpoint and posts ratings; each rated group is
replayed in the next update with a ``human`` reward layer (``agentrl.train.feedback``).

    python examples/live_feedback.py                  # the tiny local model, a scripted rater
    python examples/live_feedback.py --steps 8 --max-chars 40

The rater here is a thread standing in for a person: every half second it asks ``GET
/episodes`` for the episodes it has not rated and posts ``{"episode_id", "rating"}`` to
``POST /feedback``: +1 for a final answer of at most ``--max-chars`` characters, -1 for a
longer one. A person can do the same with curl, or drop a JSON file in ``RUN/feedback/``:
``{"episode_id": "3-5", "rating": -0.5}`` or ``{"episode_id": "3-5", "correction": "It is 5
C in Paris."}``. Each step prints the ratings received and applied, the episodes replayed and
the delay from a rating to the update that used it.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import threading
from pathlib import Path

import httpx

from agentrl.config import build_config
from agentrl.train import train


def rater(url: str, max_chars: int, stop: threading.Event) -> None:
    """Rate every new episode with a final answer: short ones up, long ones down."""
    seen: set[str] = set()
    while not stop.wait(0.5):
        try:
            episodes = httpx.get(f"{url}/episodes", params={"last": 200}).json()
        except httpx.HTTPError:
            continue  # the endpoint is not up yet, or already down
        for e in episodes:
            if e["episode_id"] in seen or not e["final"].strip():
                continue
            seen.add(e["episode_id"])
            rating = 1.0 if len(e["final"]) <= max_chars else -1.0
            httpx.post(f"{url}/feedback", json={"episode_id": e["episode_id"], "rating": rating})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="agentrl/tiny")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--max-chars", type=int, default=60, help="the rater likes answers this short")
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stop = threading.Event()
    thread = threading.Thread(target=rater, args=(f"http://127.0.0.1:{port}", args.max_chars,
                                                  stop), daemon=True)  # fmt: skip
    thread.start()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cfg = build_config({}, [
            f"model.name={args.model}", f"train.run_dir={run}", f"train.steps={args.steps}",
            "train.warmstart_demos=32", "train.eval_episodes=0", "train.general_check=false",
            "rollout.group_size=4", "rollout.groups_per_step=2",
            "train.feedback.enabled=true", f"train.feedback.port={port}",
        ])  # fmt: skip
        try:
            train(cfg, progress=False)
        finally:
            stop.set()
        for line in (run / "metrics.jsonl").read_text().splitlines():
            m = json.loads(line)
            print(f"step {m['step']}: ratings received {m['feedback/received']:.0f}, applied "
                  f"{m['feedback/applied']:.0f}, episodes replayed "
                  f"{m['feedback/replayed_episodes']:.0f}, rating -> update "
                  f"{m['feedback/latency_s']:.1f} s, reading them {m['time/feedback_s']:.3f} s, "
                  f"step {m['time/step_s']:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
