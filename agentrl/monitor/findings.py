"""What ``agentrl doctor`` reports: a ``Finding`` per problem, and the small helpers its
checks share to describe a metric window and example episodes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agentrl.monitor.rundata import RunData

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass
class Finding:
    code: str
    severity: str
    title: str
    evidence: dict[str, Any]
    fix: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def thirds(values: list[float]) -> tuple[float, float]:
    """Means of the first and the last third (at least one value each)."""
    k = max(len(values) // 3, 1)
    return sum(values[:k]) / k, sum(values[-k:]) / k


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def window(data: RunData, key: str, n: int = 8) -> dict[str, Any]:
    values = data.series(key)
    return {"metric": key, "steps": len(values), "last": [round(v, 4) for v in values[-n:]]}


def scaled(value: Any, scale: float) -> str:
    return f"{float(value) * scale:.3g}"


def examples(
    episodes: list[tuple[dict[str, Any], int | None]], where: str = "turn", n: int = 3
) -> list[dict[str, Any]]:
    """Up to ``n`` example episodes: task id, step and the turn (or call) that shows it."""
    return [
        {"task_id": e.get("task_id"), "step": e.get("step"), where: at} for e, at in episodes[:n]
    ]
