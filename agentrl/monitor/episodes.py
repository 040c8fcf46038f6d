"""An index over a run's episode logs for the trajectory viewer: ``trajectories.jsonl`` (the RL
steps) and ``eval_before.jsonl`` / ``eval_after.jsonl`` (the held-out evaluations).

Each file is read incrementally (a live run keeps appending; a half-written last line waits
for the next refresh), keeping per episode a short summary for filtering and the byte offset
of its line, so opening one episode reads one line.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.monitor.rundata import TRAJECTORIES_LOG

SOURCES = {"train": TRAJECTORIES_LOG, "eval_before": "eval_before.jsonl",
           "eval_after": "eval_after.jsonl"}  # fmt: skip


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """The fields the episode list shows and filters on."""
    reward = record.get("reward") or {}
    info = record.get("info") or {}
    return {
        "step": record.get("step"),
        "task_id": record.get("task_id"),
        "env": info.get("env_id") or str(record.get("task_id", "")).split("-")[0],
        "level": record.get("level"),
        "termination": record.get("termination"),
        "success": bool(record.get("success")),
        "reward": round(float(reward.get("total", 0.0)), 4),
        "layers": {k: round(float(v), 4) for k, v in (reward.get("layers") or {}).items()},
        "turns": len(reward.get("per_turn") or []),
        "calls": len(record.get("tool_calls") or []),
        "tools": sorted({c.get("name") for c in record.get("tool_calls") or []} - {None}),
    }


@dataclass
class _File:
    path: Path
    read_to: int = 0  # bytes parsed so far (complete lines only)
    offsets: list[int] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)

    def refresh(self) -> None:
        if not self.path.is_file():
            return
        with self.path.open("rb") as f:
            f.seek(self.read_to)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # being written: next time
                start, self.read_to = self.read_to, self.read_to + len(line)
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a corrupt line is skipped, not fatal
                self.offsets.append(start)
                self.summaries.append(summarize(record))

    def record(self, index: int) -> dict[str, Any]:
        with self.path.open("rb") as f:
            f.seek(self.offsets[index])
            return json.loads(f.readline())


class EpisodeIndex:
    """Every logged episode of a run directory, as ``{"id": "<source>:<n>", ...summary}``."""

    def __init__(self, run_dir: Path) -> None:
        self.files = {src: _File(Path(run_dir) / name) for src, name in SOURCES.items()}
        self._lock = threading.Lock()

    def refresh(self) -> None:
        with self._lock:
            for f in self.files.values():
                f.refresh()

    def all(self) -> list[dict[str, Any]]:
        self.refresh()
        return [{"id": f"{src}:{i}", "source": src, **s}
                for src, f in self.files.items() for i, s in enumerate(f.summaries)]  # fmt: skip

    def get(self, episode_id: str) -> dict[str, Any]:
        """The whole record; KeyError naming the id where there is no such episode."""
        src, _, n = episode_id.partition(":")
        self.refresh()
        if src not in self.files or not n.isdigit() or int(n) >= len(self.files[src].offsets):
            raise KeyError(f"no episode {episode_id!r} (ids look like train:0, eval_after:3)")
        return {"id": episode_id, "source": src, **self.files[src].record(int(n))}


def matches(summary: dict[str, Any], filters: dict[str, Any]) -> bool:
    """Whether an episode summary passes the viewer's filters (a None filter passes all):
    source, termination, env, level, step, success, and a reward layer within [min, max]."""
    for key in ("source", "termination", "env", "level", "step", "success"):
        want = filters.get(key)
        if want is not None and summary.get(key) != want:
            return False
    layer = filters.get("layer")
    if layer:
        value = summary["reward"] if layer == "total" else summary["layers"].get(layer)
        if value is None:
            return False
        lo, hi = filters.get("layer_min"), filters.get("layer_max")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            return False
    return True
