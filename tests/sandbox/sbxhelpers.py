"""Helpers for sandbox tests: skip where bwrap cannot run, and check nothing is left behind."""

from __future__ import annotations

import glob
import os
import tempfile
import time

import pytest

from agentrl.sandbox import bwrap_status
from agentrl.sandbox.bwrap import RUN_AS_UID
from agentrl.sandbox.runner import TEMP_PREFIX

BWRAP_OK, BWRAP_REASON = bwrap_status()
needs_bwrap = pytest.mark.skipif(not BWRAP_OK, reason=f"bwrap cannot run here: {BWRAP_REASON}")


def _uid_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def live_sandbox_processes() -> list[int]:
    """Sandbox processes still running (zombies excluded: see ``sandbox_zombies``)."""
    return [p for p in sandbox_processes() if _state(p) not in ("Z", "gone")]


def sandbox_zombies(parents: list[int] | None = None) -> list[int]:
    """bubblewrap's pid-1 helper exits after the outer bwrap, so it is reparented to the
    host's init (or to a subreaper, as tool workers are) and reaped there.

    ``parents``: count only zombies whose parent is one of these pids (other tests' zombies
    wait for the host's init, which may be slow or absent in a container)."""
    zombies = [p for p in sandbox_processes() if _state(p) == "Z"]
    return zombies if parents is None else [p for p in zombies if _ppid(p) in set(parents)]


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("PPid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def sandbox_processes() -> list[int]:
    """Host processes running as the sandbox user (bwrap and anything inside it)."""
    if os.geteuid() != 0:  # without root the sandbox runs as us: look for bwrap instead
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if b"/sandbox/launcher.py" in fh.read() or b"/sandbox/main.py" in fh.read():
                        found.append(int(pid))
            except OSError:
                pass
        return found
    return [int(p) for p in filter(str.isdigit, os.listdir("/proc")) if _uid_of(p) == RUN_AS_UID]


def snapshot() -> tuple[int, int]:
    """(open fds of this process, sandbox temp dirs)."""
    temps = glob.glob(os.path.join(tempfile.gettempdir(), TEMP_PREFIX + "*"))
    return len(os.listdir("/proc/self/fd")), len(temps)


def assert_clean(before: tuple[int, int]) -> None:
    """No running sandbox process, no new fd, no sandbox temp dir left."""
    deadline = time.monotonic() + 1.0
    while live_sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_sandbox_processes() == [], "stray sandbox processes"
    assert snapshot() == before, "leaked fds or temp dirs (fds, temp dirs)"
