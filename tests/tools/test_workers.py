"""Worker mode, the real path for tools that may hang or crash: timeouts kill the worker's
whole tree, dead workers are replaced, calls from many threads overlap."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid

import pytest

from agentrl.tools.guard import ToolGuard
from agentrl.tools.health import HealthBoard
from agentrl.tools.registry import ToolRegistry, tool
from agentrl.tools.settings import ToolsConfig
from agentrl.tools.workers import WorkerPool
from agentrl.types import ToolCall


@tool
def echo(text: str, timeout: float = 0.0) -> dict:
    """Echo back (its ``timeout`` argument is just data: the harness sets the kill time)."""
    return {"text": text, "pid": os.getpid(), "timeout_arg": timeout}


@tool
def sleepy(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "awake"


@tool
def spawner(seconds: float, token: str) -> int:
    """Start a child process (marked with ``token``) that outlives the call, then hang."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", token])
    time.sleep(seconds)
    return child.pid


@tool
def crash(code: int) -> str:
    """Kill its own worker."""
    os._exit(code)


@tool
def raises(x: int) -> int:
    """Raise."""
    raise KeyError(f"no row {x}")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def pool():
    p = WorkerPool(4)
    yield p
    pids = p.pids()
    p.close()
    assert not any(alive(pid) for pid in pids)


def make_guard(pool, **settings) -> ToolGuard:
    cfg = ToolsConfig(mode="worker", timeout_floor_s=0.5, timeout_ceiling_s=1.0, **settings)
    registry = ToolRegistry([echo, sleepy, spawner, crash, raises])
    return ToolGuard(registry, settings=cfg, health=HealthBoard(), pool=pool)


def test_worker_call_runs_in_another_process_and_sanitizes_there(pool):
    guard = make_guard(pool)
    r = guard.call(ToolCall("echo", {"text": "hi"}))
    value = json.loads(r.content)
    assert r.ok and value["text"] == "hi" and value["pid"] != os.getpid()
    assert value["pid"] in pool.pids()
    err = guard.call(ToolCall("raises", {"x": 3}))
    assert (err.error_code, json.loads(err.content)["message"]) == (
        "exception",
        "KeyError: 'no row 3'",
    )


def test_timeout_kills_the_worker_and_its_children_and_ignores_model_arguments(pool):
    guard = make_guard(pool, timeout_initial_s=0.5)
    r = guard.call(ToolCall("echo", {"text": "x", "timeout": 999.0}))
    assert r.ok  # a "timeout" argument is plain data
    start = time.monotonic()
    token = f"agentrl-test-{uuid.uuid4().hex}"
    slow = guard.call(ToolCall("spawner", {"seconds": 30, "token": token}))
    elapsed = time.monotonic() - start
    assert slow.error_code == "timeout" and 0.5 <= elapsed < 1.5
    assert json.loads(slow.content)["message"].startswith("spawner did not answer within 0.5 s")
    assert pool.killed == 1
    time.sleep(0.2)
    leftovers = [p for p in os.listdir("/proc") if p.isdigit() and token.encode() in _cmdline(p)]
    assert [p for p in leftovers if alive(int(p))] == []  # the child died with its worker
    assert guard.call(ToolCall("sleepy", {"seconds": 0.01})).content == "awake"  # replaced


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def test_crashed_worker_is_a_harness_fault_and_is_replaced(pool):
    guard = make_guard(pool)
    before = set(pool.pids()) if pool.pids() else set()
    r = guard.call(ToolCall("crash", {"code": 7}))
    assert (r.ok, r.error_code) == (False, "worker_crash")
    assert json.loads(r.content)["message"] == (
        "crash: the tool's worker process died (worker died (exit code 7))."
    )
    ok = guard.call(ToolCall("echo", {"text": "after"}))
    assert ok.ok and pool.crashed == 1 and json.loads(ok.content)["pid"] not in before
    assert guard.rates()["tool/crash/worker_crash_rate"] == 1.0


def test_calls_from_many_threads_overlap(pool):
    guard = make_guard(pool)
    guard.call(ToolCall("echo", {"text": "warm"}))
    for _ in range(3):  # start every worker first
        threading.Thread(target=guard.call, args=(ToolCall("echo", {"text": "w"}),)).start()
    results = []

    def one():
        results.append(guard.call(ToolCall("sleepy", {"seconds": 0.4})).content)

    threads = [threading.Thread(target=one) for _ in range(8)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    assert results == ["awake"] * 8
    assert elapsed < 8 * 0.4 / 2  # 4 workers: about 2 rounds of 0.4 s, far from 3.2 s serial


def test_a_tool_that_cannot_be_sent_to_a_worker_is_a_clear_config_error(pool):
    lock = threading.Lock()

    @tool
    def holds_lock() -> int:
        """Closes over a lock (not picklable)."""
        with lock:
            return 1

    guard = ToolGuard(ToolRegistry([holds_lock]), settings=ToolsConfig(mode="worker"),
                      health=HealthBoard(), pool=pool)  # fmt: skip
    with pytest.raises(TypeError, match=r"tool 'holds_lock' cannot run in a worker process"):
        guard.call(ToolCall("holds_lock", {}))
