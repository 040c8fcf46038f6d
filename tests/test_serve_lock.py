"""Two servers on one model: the init lock serializes loading (wait or fail, the holder
named in the log), a killed holder blocks nobody, stale session files are cleaned."""

import os
import signal
import subprocess
import sys
import time

import pytest

from agentrl.serve.lock import (
    ServerBusy,
    clean_stale_sessions,
    init_lock,
    lock_dir,
    model_key,
    session_file,
    sessions,
)

HOLD = """
import sys, time
from agentrl.serve.lock import init_lock
with init_lock(sys.argv[1], log=lambda m: print(m, flush=True)):
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _holder(model, seconds, env_cache):
    env = {**os.environ, "AGENTRL_CACHE": str(env_cache)}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, model, str(seconds)], env=env,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert "init lock" in proc.stdout.readline() and proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_server_fails_or_waits_and_says_who_holds_the_lock(cache):
    model = str(cache)  # any existing path
    holder = _holder(model, 2.0, cache / "cache")
    with pytest.raises(ServerBusy, match=f"pid {holder.pid}"), init_lock(model, on_busy="fail"):
        pass
    logs = []
    t = time.monotonic()
    with init_lock(model, on_busy="wait", log=logs.append) as key:
        waited = time.monotonic() - t
    assert key == model_key(model) and waited > 0.5
    assert logs[0] == f"init lock on {model} is held by pid {holder.pid}: waiting"
    assert logs[1].startswith("init lock on") and "taken" in logs[1]
    holder.wait(timeout=10)


def test_a_killed_holder_blocks_nobody_and_its_session_file_is_cleaned(cache):
    model = str(cache)
    holder = _holder(model, 60.0, cache / "cache")
    key = model_key(model)
    stale = lock_dir() / f"{key}.{holder.pid}.session"
    stale.write_text("{}")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    logs = []
    t = time.monotonic()
    with init_lock(model, on_busy="fail", log=logs.append):
        assert time.monotonic() - t < 2
    assert not stale.exists()
    assert f"removed the stale session file of server pid {holder.pid} (no longer running)" in logs
    assert clean_stale_sessions(key, logs.append) == []


def test_session_file_lives_while_serving_and_names_other_servers(cache):
    key = model_key("some/model")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (lock_dir() / f"{key}.{other.pid}.session").write_text("{}")
        logs = []
        with session_file(key, {"port": 8000}, logs.append) as path:
            assert path.exists() and os.getpid() in sessions(key)
            assert logs == [f"also serving this model: pid {other.pid}"]
        assert not path.exists()
    finally:
        other.kill()
    with pytest.raises(ValueError, match="on_busy"), init_lock("m", on_busy="maybe"):
        pass
