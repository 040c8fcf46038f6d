"""The loop each tool worker process runs (kept light: no torch, no model code).

Protocol over a ``multiprocessing`` pipe. The worker first sends ``("ready", pid)``; then for
each request ``(key, blob, kwargs, max_chars)`` it loads the tool function (``blob`` is its
cloudpickle, sent the first time this worker sees ``key``; the worker loads it and replies
``("loaded",)`` before running it, so loading is not timed), calls it and replies
``("ok", text, truncated)``, ``("exception", message)`` or ``("harness", code, message)``.
The result is sanitized here, so a pathological return value never reaches the trainer.
``None`` or a closed pipe ends the loop.
"""

from __future__ import annotations

import json
import os
import sys
from collections import OrderedDict
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from agentrl.tools.errors import HarnessFault
from agentrl.tools.sanitize import safe_str, sanitize

_CACHE_SIZE = 128
SYS_PATH_ENV = "AGENTRL_WORKER_SYS_PATH"  # the parent's sys.path, so tools import the same


def _load(cache: OrderedDict, key: str, blob: bytes | None) -> Any:
    fn = cache.get(key)
    if fn is not None:
        cache.move_to_end(key)
        return fn
    if blob is None:
        raise LookupError(f"tool {key!r} was never sent to this worker")
    fn = cloudpickle.loads(blob)
    cache[key] = fn
    if len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return fn


def handle(cache: OrderedDict, request: tuple) -> tuple:
    """Run one request; never raises (except for a crash that kills the process)."""
    key, blob, kwargs, max_chars = request
    try:
        fn = _load(cache, key, blob)
    except Exception as exc:  # noqa: BLE001 - reported back as a clear message
        return ("exception", f"tool cannot be loaded in a worker process: {exc!r}")
    try:
        value = fn(**kwargs)
    except HarnessFault as exc:
        return ("harness", exc.code, f"{type(exc).__name__}: {safe_str(exc)}")
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the model must see any tool failure
        return ("exception", f"{type(exc).__name__}: {safe_str(exc)}")
    text, truncated = sanitize(value, max_chars)
    return ("ok", text, truncated)


def worker_main(conn: Any) -> None:
    """Serve requests on ``conn`` until it closes (the pool starts each worker in its own
    session, so a kill takes the worker's whole process tree)."""
    cache: OrderedDict = OrderedDict()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        key, blob = request[0], request[1]
        if blob is not None:  # a new tool: load it (maybe importing its module) before the
            try:  # call, and say so, so that loading never counts against the call's timeout
                _load(cache, key, blob)
                conn.send(("loaded",))
            except Exception as exc:  # noqa: BLE001 - reported back as a clear message
                conn.send(("exception", f"tool cannot be loaded in a worker process: {exc!r}"))
                continue
        reply = handle(cache, request)
        reap_orphans()
        conn.send(reply)


def _prctl_setup() -> None:
    """Linux: SIGKILL this worker if the process that started it dies (no orphans), and make
    it a child subreaper, so the processes its tools leave behind (bubblewrap's pid-1 helper
    outlives the outer bwrap) are reparented here and reaped by ``reap_orphans``, not left as
    zombies for the host's init."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if libc.prctl(36, 1) == 0:  # PR_SET_CHILD_SUBREAPER
            import agentrl.sandbox.runner as sandbox_runner

            sandbox_runner.REAP_ORPHANS = True
    except (OSError, AttributeError):
        pass


def reap_orphans() -> int:
    """Reap every finished child (only called between requests, when no tool is running)."""
    reaped = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped += 1


if __name__ == "__main__":
    _prctl_setup()
    sys.path[:] = json.loads(os.environ.get(SYS_PATH_ENV, "null")) or sys.path
    worker_main(Connection(int(sys.argv[1])))
