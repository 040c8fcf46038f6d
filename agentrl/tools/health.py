"""Per-tool health shared by every episode's guard: recent latencies (for the dynamic timeout),
the circuit breaker, and counters of calls and failure classes.

Environments are rebuilt each episode, so this state lives on a ``HealthBoard`` that outlives
them (``agentrl.tools.runtime.shared_health()`` by default).
"""

from __future__ import annotations

import math
import threading
from collections import Counter, deque
from collections.abc import Callable, Sequence

from agentrl.tools.breaker import CircuitBreaker
from agentrl.tools.settings import Policy


def dynamic_timeout(
    latencies: Sequence[float], base: float, floor: float, ceiling: float, initial: float
) -> float:
    """``base x (mean + std)`` of recent latencies, clamped to ``[floor, ceiling]``.

    With fewer than two latencies known the timeout is ``initial`` (clamped too). The std is
    the population std. Pure function of its arguments.
    """
    if len(latencies) < 2:
        return min(max(initial, floor), ceiling)
    n = len(latencies)
    mean = sum(latencies) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in latencies) / n) if math.isfinite(mean) else mean
    value = base * (mean + std)
    if not math.isfinite(value):
        return ceiling
    return min(max(value, floor), ceiling)


class ToolHealth:
    """One tool's latencies and breaker; thread-safe."""

    def __init__(self, window: int, breaker: CircuitBreaker) -> None:
        self.latencies: deque[float] = deque(maxlen=window)
        self.breaker = breaker
        self._lock = threading.Lock()

    def timeout(self, policy: Policy) -> float:
        """The kill threshold for the next call (set by the harness, never by arguments)."""
        with self._lock:
            recent = list(self.latencies)
        return dynamic_timeout(
            recent,
            policy.timeout_base,
            policy.timeout_floor_s,
            policy.timeout_ceiling_s,
            policy.timeout_initial_s,
        )

    def add_latency(self, seconds: float) -> None:
        """A call that completed (success or exception); timeouts are not added."""
        with self._lock:
            self.latencies.append(seconds)


class HealthBoard:
    """Health of every tool by name, plus process-wide counters for ``rates()``."""

    def __init__(self, window: int = 50, clock: Callable[[], float] | None = None) -> None:
        self.window = window
        self._clock = clock
        self._tools: dict[str, ToolHealth] = {}
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.failures: Counter[tuple[str, str]] = Counter()
        self.coerced: Counter[str] = Counter()

    def get(self, name: str, policy: Policy) -> ToolHealth:
        """The health record of ``name`` (created with ``policy``'s breaker settings)."""
        with self._lock:
            health = self._tools.get(name)
            if health is None:
                kwargs = {} if self._clock is None else {"clock": self._clock}
                breaker = CircuitBreaker(
                    policy.breaker_failures, policy.breaker_cooldown_s, **kwargs
                )
                health = self._tools[name] = ToolHealth(self.window, breaker)
            return health

    def count(self, name: str, code: str | None = None) -> None:
        """Count a call (``code=None``), a coerced call (``"coerced"``) or a failure class."""
        with self._lock:
            if code is None:
                self.calls[name] += 1
            elif code == "coerced":
                self.coerced[name] += 1
            else:
                self.failures[(name, code)] += 1

    def rates(self) -> dict[str, float]:
        """``tool/<name>/<class>_rate`` (and ``coerced_rate``) over calls made to each tool."""
        with self._lock:
            out = {
                f"tool/{name}/{code}_rate": n / max(self.calls.get(name, 0), 1)
                for (name, code), n in self.failures.items()
            }
            for name, n in self.coerced.items():
                out[f"tool/{name}/coerced_rate"] = n / max(self.calls.get(name, 0), 1)
        return out
