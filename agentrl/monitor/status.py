"""``run_dir/status.json``: whether a run is running, finished, stopped or crashed (with the
error), so ``agentrl doctor`` can tell a live run from a dead one and an out-of-memory crash
from a bad config. A run still marked ``running`` whose process is gone was killed without a
trace (the kernel's out-of-memory killer, SIGKILL)."""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

STATUS_FILE = "status.json"
OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory",
               "defaultcpuallocator")  # fmt: skip


def write_status(run_dir: Path, state: str, **extra: Any) -> None:
    """Record ``state`` (running / finished / stopped / crashed) with this process's id."""
    record = {"state": state, "pid": os.getpid(), "time": time.time(), **extra}
    path = Path(run_dir) / STATUS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, default=str))
    tmp.replace(path)


def crash_record(err: BaseException) -> dict[str, Any]:
    """What a crash leaves in status.json: the error, whether it was memory, the traceback's
    last lines."""
    text = f"{type(err).__name__}: {err}"
    memory = isinstance(err, MemoryError) or any(m in text.lower() for m in OOM_MARKERS)
    tail = traceback.format_exception(type(err), err, err.__traceback__)[-3:]
    return {"error": text[:2000], "out_of_memory": memory, "traceback": "".join(tail)[-4000:]}


def read_status(run_dir: Path) -> dict[str, Any] | None:
    """status.json, with ``state`` turned to ``killed`` where it says running but its process
    is gone; None for a run directory written before status files existed."""
    path = Path(run_dir) / STATUS_FILE
    if not path.is_file():
        return None
    status = json.loads(path.read_text())
    if status.get("state") == "running" and not pid_alive(int(status.get("pid", 0))):
        status["state"] = "killed"
    return status


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True
