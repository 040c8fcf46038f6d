"""Soak: 2,000 tool calls across 32 concurrent episodes, 20% hanging past the timeout and 5%
crashing their worker. It completes, every call is classified as planned, every episode
ends with a reason, and the harness's memory grows < 10%."""

from __future__ import annotations

import json
import os
import random
import threading
import time

import pytest

from agentrl.envs.core import ToolTaskEnv
from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.tools.guard import ToolGuard
from agentrl.tools.health import HealthBoard
from agentrl.tools.registry import ToolRegistry, tool
from agentrl.tools.settings import ToolsConfig
from agentrl.tools.workers import WorkerPool
from agentrl.types import TERMINATIONS

TOTAL_CALLS, EPISODES_AT_ONCE, CALLS_PER_EPISODE = 2_000, 32, 20


@tool
def work(kind: str, n: int) -> int:
    """Answer, hang or crash, as asked.

    Args:
        kind: ok, hang or crash.
        n: A number.
    """
    if kind == "hang":
        time.sleep(120)
    if kind == "crash":
        os._exit(1)
    return 2 * n


class SoakFamily(TaskFamily):
    name = "soak"

    def tools(self, instance: TaskInstance):
        return [work]

    def sample(self, rng, level):
        return TaskInstance(f"soak-{rng.getrandbits(32)}", 1, "Do the work.")

    def check_answer(self, instance, answer):
        return answer == "done"


def rss_kb() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def call_text(kind: str, n: int) -> str:
    body = json.dumps({"name": "work", "arguments": {"kind": kind, "n": n}})
    return f"<tool_call>\n{body}\n</tool_call>"


@pytest.mark.slow  # ~70 s on 2 shared cores (500 workers restarted)
def test_soak_2000_calls_32_episodes_hangs_and_crashes():
    pool = WorkerPool(8)
    health = HealthBoard()
    settings = ToolsConfig(
        mode="worker", timeout_floor_s=0.25, timeout_ceiling_s=0.5, timeout_initial_s=0.3,
        breaker_failures=100_000,
    )  # fmt: skip
    rng = random.Random(0)
    plan = rng.choices(["ok", "hang", "crash"], weights=[75, 20, 5], k=TOTAL_CALLS)
    next_call = iter(range(TOTAL_CALLS))
    lock = threading.Lock()
    seen: dict[int, tuple[str, str | None, str]] = {}  # call index -> (planned, code, content)
    episodes: list[str] = []
    rss = {}

    def take() -> int | None:
        with lock:
            return next(next_call, None)

    def run_episodes() -> None:
        while True:
            env = ToolTaskEnv(SoakFamily(), max_turns=CALLS_PER_EPISODE + 1)
            env.guard = ToolGuard(ToolRegistry([work]), settings=settings, health=health, pool=pool)
            env.reset(seed=rng.getrandbits(32))
            info: dict = {}
            for _ in range(CALLS_PER_EPISODE):
                i = take()
                if i is None:
                    break
                if i == 200:
                    rss["warm"] = rss_kb()
                _, _, term, trunc, info = env.step(call_text(plan[i], i))
                rec = info["tool_calls"][0]
                seen[i] = (plan[i], rec["error_code"], rec["content"])
                if term or trunc:
                    break
            if not env.done:
                _, _, _, _, info = env.step("done")
            with lock:
                episodes.append(info["termination"])
            if i is None or len(seen) >= TOTAL_CALLS:
                return

    threads = [threading.Thread(target=run_episodes) for _ in range(EPISODES_AT_ONCE)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    elapsed = time.monotonic() - start
    try:
        assert not any(t.is_alive() for t in threads), "an episode thread is stuck"
        assert len(seen) == TOTAL_CALLS
        expected = {"ok": None, "hang": "timeout", "crash": "worker_crash"}
        wrong = [(i, p, c) for i, (p, c, _) in seen.items() if expected[p] != c]
        assert wrong == []
        assert all(content == str(2 * i) for i, (p, _, content) in seen.items() if p == "ok")
        assert set(episodes) <= set(TERMINATIONS)
        assert episodes.count("harness_error") == plan.count("crash")  # each crash ends one
        assert len(episodes) == episodes.count("harness_error") + episodes.count("success")
        rates = health.rates()
        assert rates["tool/work/timeout_rate"] == plan.count("hang") / TOTAL_CALLS
        assert rates["tool/work/worker_crash_rate"] == plan.count("crash") / TOTAL_CALLS
        assert pool.killed == plan.count("hang") and pool.crashed == plan.count("crash")
        assert rss_kb() < 1.10 * rss["warm"], (rss, rss_kb())
        assert len(pool.pids()) <= 8
        print(f"soak: {TOTAL_CALLS} calls, {len(episodes)} episodes in {elapsed:.1f} s")
    finally:
        pool.close()
