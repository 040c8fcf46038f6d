"""Process-wide tool runtime: the ``tools`` settings, the shared worker pool, the health board.

Environments (and so guards) are rebuilt every episode; what must outlive them lives here.
``configure(cfg.tools)`` once at start (the trainer's job), or leave the defaults::

    from agentrl.tools import runtime
    runtime.configure({"mode": "worker", "workers": 8})
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from agentrl.tools.health import HealthBoard
from agentrl.tools.settings import ToolsConfig
from agentrl.tools.workers import WorkerPool

_lock = threading.Lock()
_settings = ToolsConfig()
_health: HealthBoard | None = None
_pool: WorkerPool | None = None


def configure(settings: ToolsConfig | dict[str, Any] | None = None) -> ToolsConfig:
    """Set the process-wide tool settings; resets health and restarts the pool if it changed."""
    global _settings, _health
    if isinstance(settings, ToolsConfig):
        new = settings
    else:
        new = ToolsConfig.model_validate(settings or {})
    with _lock:
        old, _settings, _health = _settings, new, None
    if old.workers != new.workers:
        close_pool()
    return new


def current_settings() -> ToolsConfig:
    """The settings guards use when none are given."""
    return _settings


def shared_health() -> HealthBoard:
    """The health board shared by every guard of this process."""
    global _health
    with _lock:
        if _health is None:
            _health = HealthBoard(_settings.timeout_window)
        return _health


def shared_pool() -> WorkerPool:
    """The worker pool shared by every guard of this process (started on first use)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = WorkerPool(_settings.workers)
        return _pool


def close_pool() -> None:
    """Stop the shared pool's workers (also done at exit)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


atexit.register(close_pool)
