"""Init lock and session files for servers sharing one model (seed 000 §4.2: "reply session
initialization conflicted").

Servers started at once on one model take an exclusive ``flock`` on
``$AGENTRL_CACHE/serve/<key>.lock`` (``key``: a hash of the model's resolved path) while they
load it, so loading and any first-use conversion happen one at a time. ``on_busy="wait"``
(default) waits for the holder and logs that it does; ``"fail"`` stops at once with a message
naming the holder's pid. A lock is released by the kernel when its process dies, so a killed
server never blocks the next one.

While it serves, a server keeps a session file ``<key>.<pid>.session`` (its port and start
time). At start, session files of processes that are no longer alive are removed and logged
(stale files of a killed server); live ones are listed, so a second server on the same model
says who else is serving it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from agentrl.tiny.lock import cache_root, pid_alive


class ServerBusy(RuntimeError):
    """Another server holds the init lock and ``on_busy`` is ``"fail"``."""


def lock_dir() -> Path:
    path = cache_root() / "serve"
    path.mkdir(parents=True, exist_ok=True)
    return path


def model_key(model: str) -> str:
    """A short stable key for a model (its resolved path, or the id as given)."""
    where = Path(model).expanduser()
    name = str(where.resolve()) if where.exists() else model
    return hashlib.sha1(name.encode()).hexdigest()[:16]


def sessions(key: str) -> dict[int, Path]:
    """Session files of ``key``, by the pid that wrote them."""
    found = {}
    for p in lock_dir().glob(f"{key}.*.session"):
        pid = p.name[len(key) + 1 : -len(".session")]
        if pid.isdigit():
            found[int(pid)] = p
    return found


def clean_stale_sessions(key: str, log: Callable[[str], None]) -> list[int]:
    """Remove the session files of dead processes; returns their pids."""
    dead = [pid for pid in sorted(sessions(key)) if not pid_alive(pid)]
    for pid in dead:
        sessions(key)[pid].unlink(missing_ok=True)
        log(f"removed the stale session file of server pid {pid} (no longer running)")
    return dead


@contextmanager
def init_lock(model: str, *, on_busy: str = "wait", timeout_s: float = 600.0,
              log: Callable[[str], None] = print) -> Iterator[str]:  # fmt: skip
    """Hold the model's init lock while loading it; yields the model key."""
    if on_busy not in ("wait", "fail"):
        raise ValueError(f"on_busy must be 'wait' or 'fail', got {on_busy!r}")
    key = model_key(model)
    path = lock_dir() / f"{key}.lock"
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path)
            if on_busy == "fail":
                raise ServerBusy(f"another agentrl serve (pid {holder}) is loading {model}; "
                                 "wait for it or start with --on-busy wait") from None  # fmt: skip
            log(f"init lock on {model} is held by pid {holder}: waiting")
            _wait(fh, timeout_s, model)
        log(f"init lock on {model} taken (pid {os.getpid()})")
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            clean_stale_sessions(key, log)
            yield key
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _holder(path: Path) -> str:
    text = path.read_text().strip()
    return text if text.isdigit() else "unknown"


def _wait(fh, timeout_s: float, model: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise ServerBusy(f"waited {timeout_s:.0f} s for the init lock on {model}") from None
            time.sleep(0.1)


@contextmanager
def session_file(key: str, info: dict, log: Callable[[str], None] = print) -> Iterator[Path]:
    """A session file for this server while it serves (removed on a clean exit; a killed
    server's file is removed by the next start)."""
    others = [pid for pid in sessions(key) if pid != os.getpid() and pid_alive(pid)]
    if others:
        log(f"also serving this model: pid {', '.join(map(str, others))}")
    path = lock_dir() / f"{key}.{os.getpid()}.session"
    path.write_text(json.dumps({"pid": os.getpid(), "started": time.time(), **info}))
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
