"""ToolGuard overhead per call (validation + dispatch, in-process and in a worker) and sandbox
start-up per call. Not a test: prints figures (and writes them with ``--json PATH``).

    python bench/toolguard.py [--calls 2000] [--sandbox-runs 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from agentrl.sandbox import SandboxLimits, bwrap_status, run_code
from agentrl.tools.guard import ToolGuard
from agentrl.tools.health import HealthBoard
from agentrl.tools.registry import ToolRegistry, tool
from agentrl.tools.settings import ToolsConfig
from agentrl.tools.validate import validate_arguments
from agentrl.tools.workers import WorkerPool
from agentrl.types import ToolCall


@tool
def add(a: int, b: int = 1, unit: str = "c") -> dict:
    """Add two integers.

    Args:
        a: First.
        b: Second.
        unit: A label.
    """
    return {"sum": a + b, "unit": unit}


def per_call_us(fn, n: int) -> float:
    fn()  # warm
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def sandbox_ms(mode: str, runs: int) -> dict[str, float]:
    limits = SandboxLimits(timeout_s=10)
    run_code("pass", limits, mode=mode)  # warm (and the bwrap probe)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run_code("pass", limits, mode=mode)
        times.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--sandbox-runs", type=int, default=20)
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args()
    call = ToolCall("add", {"a": 2, "b": 3, "unit": "c"})
    raw = per_call_us(lambda: add.fn(a=2, b=3, unit="c"), args.calls)
    validate = per_call_us(lambda: validate_arguments(add, call.arguments), args.calls)
    inproc = ToolGuard(ToolRegistry([add]), settings=ToolsConfig(), health=HealthBoard())
    inprocess = per_call_us(lambda: inproc.call(call), args.calls)
    pool = WorkerPool(1)
    try:
        worker_guard = ToolGuard(ToolRegistry([add]), settings=ToolsConfig(mode="worker"),
                                 health=HealthBoard(), pool=pool)  # fmt: skip
        worker = per_call_us(lambda: worker_guard.call(call), max(args.calls // 4, 1))
    finally:
        pool.close()
    figures: dict = {
        "tool_raw_call_us": round(raw, 2),
        "validation_us": round(validate, 2),
        "guard_inprocess_us": round(inprocess, 2),
        "guard_inprocess_overhead_us": round(inprocess - raw, 2),
        "guard_worker_us": round(worker, 2),
        "sandbox_unsafe": sandbox_ms("unsafe", args.sandbox_runs),
    }
    ok, reason = bwrap_status()
    figures["sandbox_bwrap"] = sandbox_ms("bwrap", args.sandbox_runs) if ok else reason
    for key, value in figures.items():
        print(f"{key:>30}: {value}")
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(figures, fh, indent=2)


if __name__ == "__main__":
    main()
