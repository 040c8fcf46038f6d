"""A per-tool circuit breaker: closed -> open after k consecutive failures -> half-open after a
cool-down -> closed on a successful trial call (or open again on a failed one).

Why not pybreaker (or ``circuitbreaker``): ``pybreaker.CircuitBreaker.call`` holds the
breaker's lock for the whole protected call, so the calls of 32 concurrent episodes to one tool
would run one at a time (each possibly waiting a full timeout), and its half-open state lets
every waiting caller through in turn. Here the lock guards only the state transitions: calls
overlap, and in half-open exactly one trial call is let through while the others get
``circuit_open`` at once. ``circuitbreaker`` is a decorator bound to one function at import
time, which does not fit tools registered and configured at run time. The clock is injectable,
so the state machine is tested without sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class CircuitBreaker:
    """Thread-safe breaker; ``allow()`` before a call, ``record(ok)`` after it."""

    def __init__(
        self,
        failures: int = 5,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failures < 1:
            raise ValueError(f"breaker failures must be >= 1, got {failures!r}")
        if cooldown_s < 0:
            raise ValueError(f"breaker cooldown_s must be >= 0, got {cooldown_s!r}")
        self.failures = failures
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._state = CLOSED
        self._streak = 0
        self._opened_at = 0.0
        self._trial_in_flight = False
        self.opened_count = 0

    @property
    def state(self) -> str:
        """The state now (an open breaker past its cool-down reads as half-open)."""
        with self._lock:
            if self._state == OPEN and self._clock() - self._opened_at >= self.cooldown_s:
                return HALF_OPEN
            return self._state

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a trial call through (0 if not open)."""
        with self._lock:
            if self._state != OPEN:
                return 0.0
            return max(0.0, self.cooldown_s - (self._clock() - self._opened_at))

    def allow(self) -> bool:
        """May a call go ahead now? In half-open, only one trial call at a time."""
        with self._lock:
            if self._state == CLOSED:
                return True
            if self._state == OPEN:
                if self._clock() - self._opened_at < self.cooldown_s:
                    return False
                self._state = HALF_OPEN
                self._trial_in_flight = False
            if self._trial_in_flight:
                return False
            self._trial_in_flight = True
            return True

    def record(self, ok: bool) -> None:
        """The outcome of an allowed call."""
        with self._lock:
            if ok:
                self._state, self._streak, self._trial_in_flight = CLOSED, 0, False
                return
            self._streak += 1
            if self._state == OPEN:  # a call let through before the breaker opened
                return
            if self._state == HALF_OPEN or self._streak >= self.failures:
                self.opened_count += 1
                self._state, self._opened_at, self._trial_in_flight = OPEN, self._clock(), False

    def release(self) -> None:
        """An allowed call that ended without an outcome that counts (e.g. bad arguments)."""
        with self._lock:
            if self._state == HALF_OPEN:
                self._trial_in_flight = False
