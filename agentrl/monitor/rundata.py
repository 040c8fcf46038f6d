"""Everything ``agentrl doctor`` reads from a run directory, loaded once and tolerant of a run
that is still going (a half-written last line) or that crashed (no summary, no model)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentrl.monitor.alerts import ALERTS_LOG
from agentrl.monitor.curves import EVAL_LOG, METRICS_LOG
from agentrl.monitor.metrics import read_jsonl
from agentrl.monitor.status import read_status

TRAJECTORIES_LOG = "trajectories.jsonl"


@dataclass
class RunData:
    """A run directory's logs: step metrics, evaluation points, the episodes of the newest
    ``recent_steps`` steps, alerts, the summary, the status and the config (a plain dict)."""

    path: Path
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    episodes: list[dict[str, Any]]
    alerts: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    status: dict[str, Any] | None = None

    def points(self, key: str) -> list[tuple[int, float]]:
        """``(steps done, value)`` of every step that logged ``key`` as a number (oldest
        first; NaN kept: a plot shows it as a gap)."""
        return [(int(m["step"]) + 1, float(m[key])) for m in self.metrics if _number(m.get(key))]

    def series(self, key: str) -> list[float]:
        """The finite values of ``key`` over the steps that logged it (oldest first)."""
        return [v for _, v in self.points(key) if v == v]

    def setting(self, dotted: str, default: Any = None) -> Any:
        """A config value by its dotted key (``algo.kl.coef``), ``default`` where unset."""
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def load_run(run_dir: str | Path, recent_steps: int = 5) -> RunData:
    """Read ``run_dir`` (episodes of the newest ``recent_steps`` steps; none for 0);
    FileNotFoundError where it is not a run directory."""
    path = Path(run_dir)
    if not (path / "config.yaml").is_file():
        raise FileNotFoundError(f"{path} is not a run directory (no config.yaml)")
    config = yaml.safe_load((path / "config.yaml").read_text()) or {}
    metrics = read_jsonl(path / METRICS_LOG)
    last = max((int(m.get("step", 0)) for m in metrics), default=0)
    logged = read_jsonl(path / TRAJECTORIES_LOG) if recent_steps > 0 else []
    episodes = [e for e in logged if int(e.get("step", 0)) > last - recent_steps]
    summary_path = path / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    return RunData(path, config, metrics, read_jsonl(path / EVAL_LOG), episodes,
                   read_jsonl(path / ALERTS_LOG), summary, read_status(path))  # fmt: skip
