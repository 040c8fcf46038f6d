"""A pool of tool worker processes: a hung or crashing tool never stalls or kills training.

``WorkerPool.run(fn, kwargs, timeout=..., max_chars=...)`` sends one call to an idle worker
and waits at most ``timeout`` seconds for its (already sanitized) reply. Past it, the worker's
whole process group is SIGKILLed and the call returns a ``timeout`` outcome; a worker that
dies mid-call gives a ``crash`` outcome. Either way the slot gets a fresh worker on its next
use. Calls from many threads (episodes) overlap, one per worker; a caller waits for a free
worker, and that wait does not count against its timeout.

Workers are fresh interpreters (``python -m agentrl.tools.worker_main``, ~50 ms to start; no
copy of the trainer's threads, GPU state or ``__main__``), each in its own session so a kill
takes its whole process tree. Tool functions travel by ``cloudpickle`` (closures included),
once per worker; loading one may import its module, which is not timed. A worker runs a
*copy*, so state a tool mutates stays in that worker: worker mode is for pure tools (keep
stateful tools in-process).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from hashlib import blake2b
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from agentrl.tools.worker_main import SYS_PATH_ENV

START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Outcome:
    """What came back from a worker: ``kind`` is ok, exception, harness, timeout or crash."""

    kind: str
    text: str = ""
    truncated: bool = False
    latency_s: float = 0.0
    detail: str = ""
    code: str = ""  # for kind == "harness": the harness code


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None:
        return "unknown exit"
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


class _Worker:
    """One live worker process (``python -m agentrl.tools.worker_main``) and its socket."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        env = {**os.environ, SYS_PATH_ENV: json.dumps(sys.path)}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agentrl.tools.worker_main", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: killed as a whole
                env=env,
            )
        finally:
            theirs.close()
        self.pid = self.proc.pid
        self.conn = Connection(ours.detach())
        self.known: set[str] = set()
        if not self.conn.poll(START_TIMEOUT_S):
            self.kill()
            raise RuntimeError(f"tool worker did not start within {START_TIMEOUT_S} s")
        try:
            self.conn.recv()
        except (EOFError, OSError) as exc:
            code = self.kill()
            raise RuntimeError(f"tool worker failed to start ({_signal_name(code)})") from exc

    def kill(self) -> int | None:
        """SIGKILL the worker's process group (itself and anything it started); reap it."""
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, OSError):
            self.proc.kill()
        try:
            code = self.proc.wait(5.0)
        except subprocess.TimeoutExpired:
            code = None
        self.conn.close()
        return code


class WorkerPool:
    """``size`` worker processes shared by every guard in this process (thread-safe)."""

    def __init__(self, size: int = 4) -> None:
        if size < 1:
            raise ValueError(f"worker pool size must be >= 1, got {size!r}")
        self.size = size
        self._idle: queue.LifoQueue[list[_Worker | None]] = queue.LifoQueue()
        for _ in range(size):
            self._idle.put([None])
        self._blobs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._closed = False
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentrl-spawner")
        self._live: set[_Worker] = set()
        self.started = 0  # workers started so far (replacements included)
        self.killed = 0  # workers killed after a timeout
        self.crashed = 0  # workers that died by themselves mid-call

    def _blob(self, fn: Any, name: str) -> tuple[str, bytes]:
        try:
            hit = self._blobs.get(fn)
        except TypeError:  # not weak-referenceable (e.g. a builtin)
            hit = None
        if hit is not None:
            return hit
        try:
            blob = cloudpickle.dumps(fn)
        except Exception as exc:
            raise TypeError(
                f"tool {name!r} cannot run in a worker process (cloudpickle: {exc}); "
                f"set tools.per_tool.{name}.mode=inprocess"
            ) from exc
        item = (blake2b(blob, digest_size=16).hexdigest(), blob)
        with contextlib.suppress(TypeError):
            self._blobs[fn] = item
        return item

    def _spawn(self) -> _Worker:
        # Always from one long-lived thread: a worker's parent-death signal fires when the
        # *thread* that started it exits, and callers' threads come and go.
        worker = self._spawner.submit(_Worker).result()
        with self._lock:
            self.started += 1
            self._live.add(worker)
        return worker

    def _discard(self, worker: _Worker) -> int | None:
        with self._lock:
            self._live.discard(worker)
        return worker.kill()

    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        with self._lock:
            return sorted(w.pid for w in self._live)

    def run(
        self, fn: Any, kwargs: dict[str, Any], *, timeout: float, max_chars: int, name: str = "?"
    ) -> Outcome:
        """Run ``fn(**kwargs)`` in a worker; see the module docstring. Never raises for a tool
        failure; raises ``TypeError`` if ``fn`` cannot be sent to a worker (a config error)."""
        if self._closed:
            raise RuntimeError("WorkerPool.run() after close()")
        key, blob = self._blob(fn, name)
        slot = self._idle.get()
        try:
            if slot[0] is None:
                slot[0] = self._spawn()
            worker = slot[0]
            sent_blob = key not in worker.known
            try:
                worker.conn.send((key, blob if sent_blob else None, kwargs, max_chars))
            except OSError:  # it died while idle (killed from outside): the call never ran
                self._discard(worker)
                worker = slot[0] = self._spawn()
                sent_blob = True
                worker.conn.send((key, blob, kwargs, max_chars))
            if sent_blob:
                loaded = self._await_load(slot, worker)
                if loaded is not None:
                    return loaded
                worker.known.add(key)
            start = time.perf_counter()
            try:
                ready = worker.conn.poll(timeout)
                reply = worker.conn.recv() if ready else None
            except (EOFError, OSError):
                ready, reply = True, None
            latency = time.perf_counter() - start
            if not ready:
                slot[0] = None
                self._discard(worker)
                with self._lock:
                    self.killed += 1
                return Outcome("timeout", latency_s=latency, detail=f"killed after {timeout:.3g} s")
            if reply is None:
                slot[0] = None
                code = self._discard(worker)
                with self._lock:
                    self.crashed += 1
                return Outcome(
                    "crash", latency_s=latency, detail=f"worker died ({_signal_name(code)})"
                )
            if reply[0] == "ok":
                return Outcome("ok", reply[1], reply[2], latency)
            if reply[0] == "harness":
                return Outcome("harness", latency_s=latency, detail=reply[2], code=reply[1])
            return Outcome("exception", latency_s=latency, detail=reply[1])
        finally:
            self._idle.put(slot)

    def _await_load(self, slot: list, worker: _Worker) -> Outcome | None:
        """Wait (untimed, up to START_TIMEOUT_S) for a worker to load a new tool."""
        try:
            reply = worker.conn.recv() if worker.conn.poll(START_TIMEOUT_S) else None
        except (EOFError, OSError):
            reply = None
        if reply is not None and reply[0] == "loaded":
            return None
        if reply is not None:  # ("exception", message): the tool cannot be loaded there
            return Outcome("exception", detail=reply[1])
        slot[0] = None
        code = self._discard(worker)
        with self._lock:
            self.crashed += 1
        return Outcome("crash", detail=f"worker died loading the tool ({_signal_name(code)})")

    def close(self) -> None:
        """Kill every worker; the pool cannot be used afterwards."""
        self._closed = True
        with self._lock:
            live = list(self._live)
            self._live.clear()
        for worker in live:
            worker.kill()
        self._spawner.shutdown(wait=False)
