"""Whole ``agentrl serve`` processes on one model: two started at once both serve (loading one
at a time under the init lock, which their logs show); a SIGKILLed server's session file is
removed by the next start."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

SERVE = "import sys; from agentrl.cli import app; app(sys.argv[1:])"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(model, port, log_path, cache):
    env = {**os.environ, "AGENTRL_CACHE": str(cache)}
    log = open(log_path, "w")  # noqa: SIM115 (the child writes it until killed)
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", str(model), "--port", str(port), "--slots", "2"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    return proc


def _wait_healthy(port, proc, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "server exited"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"server on {port} not healthy in {timeout} s")


def _chat(port, model_name):
    body = json.dumps({"model": model_name, "max_tokens": 4, "temperature": 0,
                       "messages": [{"role": "user", "content": "Weather in Oslo?"}]})  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    headers = {"Content-Type": "application/json"}
    req = urllib.request.Request(url, data=body.encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def test_two_servers_at_once_then_a_killed_one_is_cleaned_up(tiny_dir, tmp_path):
    cache = tmp_path / "cache"
    ports = [_free_port(), _free_port()]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [_start(tiny_dir, p, log, cache) for p, log in zip(ports, logs, strict=True)]
    try:
        for port, proc in zip(ports, procs, strict=True):
            _wait_healthy(port, proc)
        replies = [_chat(port, tiny_dir.name) for port in ports]
        assert all(r["choices"][0]["finish_reason"] in ("stop", "length") for r in replies)
        assert replies[0]["choices"][0]["message"] == replies[1]["choices"][0]["message"]
        texts = [log.read_text() for log in logs]
        for text in texts:
            assert f"init lock on {tiny_dir}" in text and "taken" in text
        sessions = sorted((cache / "serve").glob("*.session"))
        assert len(sessions) == 2  # one live session file per server

        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=10)
        third_log = tmp_path / "c.log"
        third_port = _free_port()
        procs.append(_start(tiny_dir, third_port, third_log, cache))
        _wait_healthy(third_port, procs[2])
        text = third_log.read_text()
        assert f"removed the stale session file of server pid {procs[0].pid}" in text
        assert f"pid {procs[1].pid}" in text  # the live server is named, not removed
        assert len(list((cache / "serve").glob("*.session"))) == 2
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
