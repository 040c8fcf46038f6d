"""A run's logged episodes read back token-exact: ``trajectories.jsonl`` lines (written by
``Trajectory.to_record``) -> ``Trajectory`` objects, and the task instance they played.

``load_logs(paths)`` takes run directories (their ``trajectories.jsonl``) or JSONL files
(``eval_after.jsonl``, ...). A line written before the token fields existed is refused with
the file and line named: such a log holds text only, and re-tokenizing text is not what the
policy saw (DESIGN contract 1).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agentrl.types import Trajectory

TRAJECTORIES_FILE = "trajectories.jsonl"


class LogError(ValueError):
    """A log that cannot be read back into episodes (the message names file and line)."""


@dataclass
class LoggedEpisode:
    """One logged episode and where it came from."""

    traj: Trajectory
    source: str  # the file
    line: int  # 1-based
    step: int | None  # the RL step that played it (None in evaluation logs)
    prompt_text: str | None = None  # the opening prompt as text (a training log's first span)


def log_files(paths: Iterable[str | Path]) -> list[Path]:
    """Each path's log: a run directory's ``trajectories.jsonl``, or the file itself."""
    files = []
    for p in map(Path, paths):
        f = p / TRAJECTORIES_FILE if p.is_dir() else p
        if not f.is_file():
            where = f"{p} has no {TRAJECTORIES_FILE}" if p.is_dir() else f"{p} does not exist"
            raise LogError(f"no episode log: {where}")
        files.append(f)
    return files


def load_logs(paths: Iterable[str | Path]) -> list[LoggedEpisode]:
    """Every episode of every log, in file and line order; LogError names the bad line."""
    out = []
    for f in log_files(paths):
        with f.open() as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    traj = Trajectory.from_record(record)
                except (ValueError, KeyError, TypeError, IndexError) as err:
                    reason = f"missing field {err}" if isinstance(err, KeyError) else str(err)
                    raise LogError(f"{f}:{n}: {reason}") from err
                out.append(LoggedEpisode(traj, str(f), n, record.get("step"), _prompt(record)))
    return out


def _prompt(record: dict) -> str | None:
    """The opening prompt's text where the record carries its loss-mask spans."""
    spans = record.get("spans") or []
    return spans[0].get("text") if spans and spans[0].get("mask") == 0 else None


def prompt_ids(traj: Trajectory) -> tuple[int, ...]:
    """The ids before the episode's first sampled token (its opening prompt)."""
    first = traj.contexts()[0]
    k = next((i for i, m in enumerate(first.loss_mask) if m), len(first.loss_mask))
    return tuple(first.token_ids[:k])


def instance_key(traj: Trajectory) -> tuple:
    """The task instance an episode played: env, ``task_id`` and its opening prompt ids (two
    episodes compared in a preference pair answered the same prompt)."""
    return (traj.info.get("env_id"), traj.task_id, prompt_ids(traj))
