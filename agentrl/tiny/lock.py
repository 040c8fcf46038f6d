"""One build at a time per output directory: an ``flock`` lock file and stale temp clean-up.

Builds write to ``.<name>.tmp-<pid>`` next to the output directory ``<name>`` and rename it
into place. Two processes building at once used to delete each other's finished directory,
and a killed build left its temp directory behind for good. Now a build holds an exclusive
lock on ``.<name>.lock`` (a waiting process then finds the finished build and reuses it), and
under that lock the temp directories of processes that are no longer alive are removed.
The lock file itself is kept: deleting it would let a waiter and a newcomer lock two
different files.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

MARKER = "BUILD_COMPLETE"  # written last into a finished build


def cache_root() -> Path:
    """``$AGENTRL_CACHE`` (default ``~/.cache/agentrl``): where builds are cached."""
    return Path(os.environ.get("AGENTRL_CACHE") or Path.home() / ".cache" / "agentrl")


def is_complete(path: Path) -> bool:
    """Whether ``path`` holds a finished build (the marker is written last)."""
    return (path / MARKER).is_file()


def build_once(out: Path, write: Callable[[Path], str], force: bool = False) -> Path:
    """``out``, built first unless a finished build is there (``force``: build anyway).

    ``write(tmp)`` fills the temp directory and returns the marker's text. It runs under
    ``build_lock(out)`` (a waiting process then finds the build done); stale temp directories
    go first; the temp directory is renamed to ``out`` and the marker is written last.
    """
    if is_complete(out) and not force and not temp_dirs(out):
        return out
    with build_lock(out):
        remove_stale_temps(out)
        if is_complete(out) and not force:
            return out
        tmp = temp_dir(out)
        shutil.rmtree(tmp, ignore_errors=True)
        info = write(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
        with open(out / MARKER, "w") as f:
            f.write(info)
            f.flush()
            os.fsync(f.fileno())
    return out


def temp_dir(out: Path, pid: int | None = None) -> Path:
    """The temp directory a build by ``pid`` (default: this process) writes before renaming."""
    return out.parent / f".{out.name}.tmp-{os.getpid() if pid is None else pid}"


def temp_dirs(out: Path) -> dict[int, Path]:
    """Build temp directories next to ``out``, by the pid that made them."""
    prefix = f".{out.name}.tmp-"
    if not out.parent.is_dir():
        return {}
    found: dict[int, Path] = {}
    for p in out.parent.iterdir():
        pid = p.name[len(prefix) :]
        if p.name.startswith(prefix) and pid.isdigit() and p.is_dir():
            found[int(pid)] = p
    return found


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one owned by another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(out: Path) -> list[Path]:
    """Remove the temp directories of dead processes next to ``out``; return them.

    Call it under ``build_lock(out)``: a live build's directory is never touched.
    """
    stale = [p for pid, p in sorted(temp_dirs(out).items()) if not pid_alive(pid)]
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return stale


@contextmanager
def build_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``.<name>.lock`` next to ``out`` (waits for it)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
