"""One test per attack (DESIGN "Reliability"): each is contained, killed and reported, and
nothing is left behind (processes, temp dirs, file descriptors)."""

from __future__ import annotations

import os
import socket
import time

import pytest
from sbxhelpers import assert_clean, needs_bwrap, snapshot

from agentrl.sandbox import SandboxLimits, run_code

pytestmark = needs_bwrap
FAST = SandboxLimits(timeout_s=1.5, memory_mb=256, processes=16, max_output_chars=1_000)


@pytest.fixture
def clean():
    before = snapshot()
    yield
    assert_clean(before)


def test_normal_program_output_and_exit_code(clean):
    r = run_code("import sys\nprint(6 * 7)\nprint('oops', file=sys.stderr)\nsys.exit(3)", FAST)
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out, r.killed_by) == ("42\n", "oops\n", 3,
                                                                          False, None)  # fmt: skip
    assert r.mode == "bwrap" and r.duration_s < FAST.timeout_s


def test_fork_bomb_is_contained(clean):
    code = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    start = time.monotonic()
    r = run_code(code, FAST)
    assert r.timed_out and r.killed_by == "wall_clock" and r.exit_code == -9
    assert time.monotonic() - start < FAST.timeout_s + 3


def test_busy_loop_is_killed_by_the_wall_clock(clean):
    r = run_code("while True:\n    pass\n", FAST)
    assert r.timed_out and r.killed_by == "wall_clock"
    assert FAST.timeout_s <= r.duration_s < FAST.timeout_s + 1.0


def test_busy_loop_hits_the_cpu_limit():
    r = run_code("while True:\n    pass\n", SandboxLimits(timeout_s=10, cpu_s=1))
    assert not r.timed_out and r.killed_by == "cpu_limit" and r.exit_code < 0
    assert r.duration_s < 5


def test_sleep_past_the_timeout(clean):
    r = run_code("import time\nprint('start')\ntime.sleep(30)\nprint('never')", FAST)
    assert r.timed_out and r.stdout == "start\n" and r.duration_s < FAST.timeout_s + 1.0


def test_memory_bomb(clean):
    r = run_code("blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))\n", FAST)
    assert r.killed_by == "memory_limit" and "MemoryError" in r.stderr and not r.timed_out


def test_one_gigabyte_of_stdout_is_capped(clean):
    code = "import sys\nchunk = 'x' * 2**20\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n"
    limits = SandboxLimits(timeout_s=10, file_size_mb=4, max_output_chars=500)
    start = time.monotonic()
    r = run_code(code, limits)
    assert r.killed_by == "output_limit" and r.stdout_truncated and not r.timed_out
    assert r.stdout.startswith("x" * 500) and "truncated: 4194304 bytes written" in r.stdout
    assert len(r.stdout) < 600 and time.monotonic() - start < 5


def test_reading_secrets_and_harness_environment(clean, monkeypatch):
    monkeypatch.setenv("AGENTRL_TEST_SECRET", "hunter2")
    code = (
        "import os\n"
        "for path in ('/etc/shadow', '/root/.bashrc', '/proc/1/environ', "
        f"{os.getcwd()!r} + '/pyproject.toml'):\n"
        "    try:\n"
        "        print(path, open(path).read()[:20])\n"
        "    except OSError as e:\n"
        "        print(path, type(e).__name__)\n"
        "print(sorted(os.environ))\n"
        "print(os.getuid(), os.getgid())\n"
    )
    r = run_code(code, FAST)
    assert "hunter2" not in r.stdout and "AGENTRL_TEST_SECRET" not in r.stdout
    lines = r.stdout.splitlines()
    assert lines[0] == "/etc/shadow FileNotFoundError"
    assert lines[1] == "/root/.bashrc FileNotFoundError"
    assert lines[3].endswith("pyproject.toml FileNotFoundError")
    assert lines[4] == "['HOME', 'LANG', 'PATH', 'PWD', 'PYTHONDONTWRITEBYTECODE']"
    assert lines[5] == "65534 65534"


def test_no_network_even_to_loopback(clean):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    code = (
        "import socket\n"
        "s = socket.socket()\n"
        "s.settimeout(1)\n"
        "try:\n"
        f"    s.connect(('127.0.0.1', {port}))\n"
        "    print('connected')\n"
        "except OSError as e:\n"
        "    print('refused', type(e).__name__)\n"
        "print(socket.if_nameindex())\n"
    )
    r = run_code(code, FAST)
    with pytest.raises(TimeoutError):
        server.accept()
    server.close()
    assert r.stdout.splitlines() == ["refused ConnectionRefusedError", "[(1, 'lo')]"]


def test_sigterm_ignored_still_killed(clean):
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"
    r = run_code(code, FAST)
    assert r.timed_out and r.killed_by == "wall_clock" and r.duration_s < FAST.timeout_s + 1.0


def test_double_fork_escape_dies_with_the_sandbox(clean):
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    start = time.monotonic()
    r = run_code(code, FAST)
    assert r.stdout == "parent done\n" and r.exit_code == 0 and not r.timed_out
    assert time.monotonic() - start < FAST.timeout_s  # did not wait for the grandchild


def test_writes_stay_in_the_private_tmp(clean):
    code = (
        "import os\n"
        "open('/tmp/mine', 'w').write('ok')\n"
        "print(open('/tmp/mine').read())\n"
        "for path in ('/usr/evil', '/sandbox/main.py'):\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n"
    )
    r = run_code(code, FAST)
    assert r.stdout.splitlines() == ["ok", "OSError", "OSError"]
