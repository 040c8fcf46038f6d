"""Alert rules over a run's step metrics: the condition (a pure function of the metric
history), and the monitor that reports each alert once to the console, ``alerts.jsonl`` and
an optional webhook, and says when a ``stop`` rule fired.

An alert fires when its condition becomes true and re-arms when it is false again, so a KL
that stays high is one alert, not one per step.
"""

from __future__ import annotations

import fnmatch
import json
import math
import time
import urllib.request
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentrl.config.monitor import AlertRule
from agentrl.monitor.metrics import JsonlSink

ALERTS_LOG = "alerts.jsonl"


@dataclass
class Alert:
    """One fired rule: what it saw and when."""

    rule: str
    step: int
    metric: str
    value: float
    message: str
    action: str


def metric_value(record: dict[str, Any], pattern: str) -> tuple[str, float] | None:
    """``(key, value)`` of ``pattern`` in one metrics record (a glob: the largest match), or
    None where no key matches or no value is a number. NaN and infinities are numbers here
    (``"nan"`` strings of metrics.jsonl are read back as floats)."""
    keys = [k for k in record if fnmatch.fnmatchcase(k, pattern)]
    found = [(k, v) for k in keys if (v := _number(record[k])) is not None]
    if not found:
        return None
    return max(found, key=lambda kv: kv[1] if math.isfinite(kv[1]) else math.inf)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value.lower() in ("nan", "inf", "-inf"):
        return float(value)
    return None


def _halves(values: list[float]) -> tuple[float, float]:
    half = len(values) // 2
    first, second = values[:half], values[len(values) - half :]
    return sum(first) / len(first), sum(second) / len(second)


def check_rule(rule: AlertRule, history: list[dict[str, Any]]) -> tuple[str, float, str] | None:
    """``(metric, value, message)`` where ``rule`` holds on the newest ``rule.window`` records
    of ``history`` (oldest first), else None. A rule whose metric is absent does not hold."""
    window = history[-rule.window :]
    seen = [metric_value(r, rule.metric) for r in window]
    if rule.kind == "nonfinite":
        last = seen[-1] if seen else None
        if last is not None and not math.isfinite(last[1]):
            return last[0], last[1], f"{last[0]} is {last[1]}"
        return None
    if len(window) < rule.window or any(s is None for s in seen):
        return None
    values = [s[1] for s in seen]  # type: ignore[index]
    if not all(math.isfinite(v) for v in values):
        return None  # the nonfinite rule reports those
    key = seen[-1][0]  # type: ignore[index]
    span = f" over {rule.window} steps" if rule.window > 1 else ""
    if rule.kind in ("above", "below"):
        mean = sum(values) / len(values)
        hit = mean > rule.threshold if rule.kind == "above" else mean < rule.threshold
        message = f"{key} {mean:.4g} {rule.kind} {rule.threshold:g}{span}"
        return (key, mean, message) if hit else None
    start, end = _halves(values)
    if rule.kind == "drop":
        fall = (start - end) / abs(start) if start else 0.0
        if fall > rule.threshold:
            return key, end, f"{key} fell {fall:.0%} ({start:.4g} -> {end:.4g}){span}"
        return None
    other = [metric_value(r, rule.other or "") for r in window]
    if any(o is None for o in other):
        return None
    o_start, o_end = _halves([o[1] for o in other])  # type: ignore[index]
    if end - start > rule.threshold and abs(o_end - o_start) < rule.flat:
        return (
            key,
            end,
            (
                f"{key} rose {start:.3g} -> {end:.3g} while {rule.other} stayed at "
                f"{o_start:.3g} -> {o_end:.3g}{span}"
            ),
        )
    return None


class AlertMonitor:
    """Watches each step's metrics with ``rules``; see the module docstring."""

    def __init__(
        self,
        rules: list[AlertRule],
        run_dir: Path,
        *,
        webhook: str | None = None,
        webhook_timeout_s: float = 3.0,
        report: Any = print,
    ) -> None:
        self.rules, self.webhook, self.timeout = rules, webhook, webhook_timeout_s
        self.path = Path(run_dir) / ALERTS_LOG
        self.report = report
        longest = max((r.window for r in rules), default=1)
        self.history: deque[dict[str, Any]] = deque(maxlen=longest)
        self.active: set[str] = set()
        self.stop: Alert | None = None

    def seed(self, records: list[dict[str, Any]]) -> None:
        """Earlier steps' metrics (a resumed run's metrics.jsonl): windows span the resume."""
        for r in records:
            self.history.append(r)
        self.active = {r.name for r in self.rules if check_rule(r, list(self.history))}

    def observe(self, step: int, metrics: dict[str, Any]) -> list[Alert]:
        """Check every rule after ``step``; report and return the alerts that fired now."""
        self.history.append(metrics)
        fired = []
        for rule in self.rules:
            hit = check_rule(rule, list(self.history))
            if hit is None:
                self.active.discard(rule.name)
                continue
            if rule.name in self.active:
                continue
            self.active.add(rule.name)
            metric, value, message = hit
            alert = Alert(rule.name, step, metric, value, message, rule.action)
            self._emit(alert)
            fired.append(alert)
            if rule.action == "stop" and self.stop is None:
                self.stop = alert
        return fired

    def _emit(self, alert: Alert) -> None:
        record = {"time": time.time(), **asdict(alert)}
        if self.webhook:
            record["webhook"] = post_json(self.webhook, record, self.timeout)
        sink = JsonlSink(self.path)
        sink.write(record)
        sink.close()
        verb = "stopping the run" if alert.action == "stop" else "warning"
        self.report(f"[bold red]alert {alert.rule}[/] (step {alert.step}, {verb}): "
                    f"{alert.message}")  # fmt: skip
        if isinstance(record.get("webhook"), str) and record["webhook"] != "ok":
            self.report(f"[yellow]alert webhook {self.webhook}: {record['webhook']}[/]")


def post_json(url: str, payload: dict[str, Any], timeout: float) -> str:
    """POST ``payload`` as JSON; ``"ok"`` or why it failed (a webhook never stops a run)."""
    body = json.dumps(payload, default=str).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (user's URL)
            return "ok" if 200 <= resp.status < 300 else f"HTTP {resp.status}"
    except Exception as err:  # network errors of every kind: reported, not raised
        return f"{type(err).__name__}: {err}"
