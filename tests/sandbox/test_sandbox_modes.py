"""The run_python tool through the guard (worker mode), the refusal without bwrap, the explicit
unsafe mode, and the ``agentrl sandbox run`` command."""

from __future__ import annotations

import json
import logging
import time

import pytest
from sbxhelpers import live_sandbox_processes, needs_bwrap, sandbox_zombies
from typer.testing import CliRunner

import agentrl.sandbox.runner as runner_mod
from agentrl.cli import app
from agentrl.sandbox import SandboxLimits, SandboxUnavailable, python_tool, run_code
from agentrl.tools.guard import ToolGuard
from agentrl.tools.health import HealthBoard
from agentrl.tools.registry import ToolRegistry
from agentrl.tools.workers import WorkerPool
from agentrl.types import ToolCall


@needs_bwrap
def test_run_python_in_a_worker_leaves_no_process_not_even_a_zombie():
    pool = WorkerPool(2)
    try:
        tool = python_tool(SandboxLimits(timeout_s=1.0))
        guard = ToolGuard(ToolRegistry([tool]), health=HealthBoard(), pool=pool)
        ok = guard.call(ToolCall("run_python", {"code": "print(2 ** 100)"}))
        assert ok.ok and json.loads(ok.content) == {
            "stdout": "1267650600228229401496703205376\n",
            "stderr": "",
            "exit_code": 0,
        }
        slow = json.loads(guard.call(ToolCall("run_python", {"code": "while True: pass"})).content)
        assert (slow["error"], slow["exit_code"]) == ("timeout", -9)
        assert guard.policy(tool).mode == "worker" and guard.policy(tool).timeout_floor_s == 6.0
        time.sleep(0.2)
        assert live_sandbox_processes() == []
        assert sandbox_zombies(parents=pool.pids()) == []  # the workers reap their own
    finally:
        pool.close()


def test_refuses_without_bwrap_and_says_how_to_install(monkeypatch):
    monkeypatch.setattr(runner_mod, "find_bwrap", lambda: None)
    runner_mod.bwrap_status.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match=r"apt-get install -y bubblewrap"):
            run_code("print(1)")
    finally:
        runner_mod.bwrap_status.cache_clear()


def test_unsafe_mode_runs_and_warns_on_every_call(caplog):
    limits = SandboxLimits(timeout_s=1.0, max_output_chars=100)
    with caplog.at_level(logging.WARNING, logger="agentrl.sandbox"):
        first = run_code("print('hi')", limits, mode="unsafe")
        second = run_code("import time\ntime.sleep(5)", limits, mode="unsafe")
    assert (first.stdout, first.exit_code, first.mode) == ("hi\n", 0, "unsafe")
    assert second.timed_out and second.killed_by == "wall_clock"
    warnings = [r for r in caplog.records if "UNSAFE" in r.getMessage()]
    assert len(warnings) == 2


def test_bad_mode_is_a_clear_error():
    with pytest.raises(ValueError, match=r"sandbox mode must be one of \('bwrap', 'unsafe'\)"):
        run_code("print(1)", mode="docker")


@needs_bwrap
def test_cli_sandbox_run_json_and_text(tmp_path):
    program = tmp_path / "p.py"
    program.write_text("import time\nprint('hello')\ntime.sleep(5)\n")
    cli = CliRunner()
    out = cli.invoke(app, ["sandbox", "run", str(program), "--timeout", "0.5", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["stdout"] == "hello\n" and result["timed_out"] is True
    assert result["killed_by"] == "wall_clock" and result["exit_code"] == -9
    assert set(result) >= {"stderr", "duration_s", "mode"}
    text = cli.invoke(app, ["sandbox", "run", str(program), "--timeout", "0.5"])
    assert "--- stdout ---\nhello\n--- stderr ---\n" in text.stdout
    assert "exit_code=-9 timed_out=True killed_by=wall_clock" in text.stdout
    missing = cli.invoke(app, ["sandbox", "run", str(tmp_path / "nope.py")])
    assert missing.exit_code == 2


def test_sandbox_error_is_a_harness_fault(monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("no such file: bwrap")

    monkeypatch.setattr(runner_mod.subprocess, "Popen", broken)
    tool = python_tool(SandboxLimits(timeout_s=1.0), mode="unsafe", policy={"mode": "inprocess"})
    guard = ToolGuard(ToolRegistry([tool]), health=HealthBoard())
    result = guard.call(ToolCall("run_python", {"code": "print(1)"}))
    assert (result.ok, result.error_code) == (False, "sandbox_error")
    assert "cannot start the sandbox (unsafe)" in json.loads(result.content)["message"]
