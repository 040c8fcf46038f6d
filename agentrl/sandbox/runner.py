"""Run model-written Python in the sandbox: ``run_code(code, limits, mode=...)``.

Each run gets a fresh temp directory (the code, read-only, plus host-side stdout / stderr
files), one ``bwrap`` process tree in its own session, and a wall-clock limit after which the
whole process group is SIGKILLed (the sandbox's pid namespace dies with it, taking any
double-forked or SIGTERM-ignoring process along). stdout / stderr are files capped by
RLIMIT_FSIZE, so a program printing 1 GB stops at ``file_size_mb``; the text returned is cut
to ``max_output_chars`` with a visible marker. The temp directory is removed afterwards.

``mode="unsafe"`` runs the same launcher without bwrap (rlimits, clean environment, own
session, wall-clock kill, but no namespaces: files, network and processes of the host are
reachable). It logs a warning on every call. ``bwrap_status`` (does bwrap work here?) runs
one probe program through ``run_code``, so it lives here, next to it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from agentrl.sandbox.bwrap import (
    INSTALL_HINT,
    RUN_AS_UID,
    bwrap_argv,
    find_bwrap,
    sandbox_python,
)
from agentrl.sandbox.limits import SandboxLimits, SandboxResult
from agentrl.tools.errors import HarnessFault

log = logging.getLogger("agentrl.sandbox")
MODES = ("bwrap", "unsafe")
TEMP_PREFIX = "agentrl-sbx-"
_LAUNCHER = Path(__file__).with_name("launcher.py")


#: Set by a tool worker process that made itself a child subreaper: then bubblewrap's pid-1
#: helper (which exits just after the outer bwrap) is reparented to this process and reaped
#: here after each run. Never set in a process that runs other children concurrently.
REAP_ORPHANS = False


def _reap_bwrap_helper(wait_s: float = 0.25) -> None:
    deadline = time.monotonic() + wait_s
    reaped = 0
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            reaped += 1
        elif reaped:
            return
        else:
            time.sleep(0.002)


class SandboxError(HarnessFault):
    """The sandbox itself failed (could not start): a harness fault, not the code's."""

    code = "sandbox_error"


class SandboxUnavailable(SandboxError):
    """bwrap is missing or cannot create a sandbox here; the message says how to fix it."""


@functools.lru_cache(maxsize=4)
def bwrap_status(python: str = "auto") -> tuple[bool, str]:
    """Can bwrap run a sandbox here? ``(True, "bwrap <version>")`` or ``(False, reason)``.

    Runs one real sandbox (cached per process). The reason names the fix.
    """
    path = find_bwrap()
    if path is None:
        return False, f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}"
    try:
        limits = SandboxLimits(timeout_s=20, python=python)
        result = run_code("print(6 * 7)", limits, mode="bwrap", _probe=True)
    except SandboxError as err:
        return False, f"bwrap is installed but cannot create a sandbox here: {err}"
    if result.stdout.strip() != "42":
        detail = (result.stderr or result.stdout).strip()[-500:]
        return False, f"bwrap ran but the probe program failed (exit {result.exit_code}): {detail}"
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    return True, version.stdout.strip() or "bwrap"


def _prepare(root: Path, code: str) -> Path:
    code_dir = root / "code"
    code_dir.mkdir()
    (code_dir / "main.py").write_text(code, encoding="utf-8")
    shutil.copyfile(_LAUNCHER, code_dir / "launcher.py")
    for p in (code_dir / "main.py", code_dir / "launcher.py"):
        p.chmod(0o644)
    code_dir.chmod(0o755)
    root.chmod(0o711)  # the unprivileged sandbox user must reach code/ to bind it
    return code_dir


def _read_capped(fh, max_chars: int) -> tuple[str, bool, int]:
    """(text cut to max_chars with a marker, truncated?, bytes written)."""
    size = os.fstat(fh.fileno()).st_size
    fh.seek(0)
    raw = fh.read(max_chars * 4)
    text = raw.decode("utf-8", errors="replace")
    if len(text) > max_chars or size > len(raw):
        text = text[:max_chars] + f"\n...[truncated: {size} bytes written in all]"
        return text, True, size
    return text, False, size


def _killed_by(
    exit_code: int, timed_out: bool, stderr: str, sizes: tuple[int, int], limits: SandboxLimits
) -> str | None:
    if timed_out:
        return "wall_clock"
    if exit_code < 0:
        sig = -exit_code
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return "cpu_limit" if sig == signal.SIGXCPU else "signal:SIGKILL"
        if sig == signal.SIGXFSZ:
            return "output_limit"
        try:
            return f"signal:{signal.Signals(sig).name}"
        except ValueError:
            return f"signal:{sig}"
    if exit_code != 0 and "MemoryError" in stderr[-2000:]:
        return "memory_limit"
    if max(sizes) >= limits.file_size_mb * 1024 * 1024 or "[Errno 27] File too large" in stderr:
        return "output_limit"
    return None


def _command(mode: str, code_dir: Path, limits: SandboxLimits, info_fd: int) -> list[str]:
    if mode == "bwrap":
        return bwrap_argv(find_bwrap() or "bwrap", str(code_dir), limits, info_fd)
    python = sandbox_python(limits.python)
    launcher, program = str(code_dir / "launcher.py"), str(code_dir / "main.py")
    return [python, "-I", "-B", launcher, json.dumps(limits.rlimits()), python, program]


def run_code(
    code: str, limits: SandboxLimits | None = None, *, mode: str = "bwrap", _probe: bool = False
) -> SandboxResult:
    """Run ``code`` (a Python program) sandboxed; see the module docstring.

    Raises ``SandboxUnavailable`` (bwrap missing / unusable: the message says how to install
    it) or ``SandboxError`` (the sandbox failed to start); the program's own failures, its
    timeouts and its limits are reported in the ``SandboxResult``.
    """
    limits = limits or SandboxLimits()
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {MODES}, got {mode!r}")
    if mode == "bwrap" and not _probe:
        ok, reason = bwrap_status(limits.python)
        if not ok:
            raise SandboxUnavailable(reason)
    if mode == "unsafe":
        log.warning("UNSAFE sandbox mode: running model-written code WITHOUT isolation")
    root = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
    try:
        return _run(root, _prepare(root, code), mode, limits)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(root: Path, code_dir: Path, mode: str, limits: SandboxLimits) -> SandboxResult:
    privileged = os.geteuid() == 0 and mode == "bwrap"
    drop = {"user": RUN_AS_UID, "group": RUN_AS_UID, "extra_groups": []} if privileged else {}
    work = root / "work"
    work.mkdir()
    with (
        open(root / "stdout", "w+b") as out,
        open(root / "stderr", "w+b") as err,
        open(root / "info", "w+b") as info,
    ):
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                _command(mode, code_dir, limits, info.fileno()),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=(info.fileno(),) if mode == "bwrap" else (),
                cwd=str(work),
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(work)},
                start_new_session=True,
                **drop,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start the sandbox ({mode}): {exc}") from exc
        timed_out = False
        try:
            proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the whole group, finished or not
            proc.wait()
        duration = time.monotonic() - start
        if REAP_ORPHANS and mode == "bwrap":
            _reap_bwrap_helper()
        code = proc.returncode
        if mode == "bwrap" and code > 128 and not timed_out:
            code = -(code - 128)  # bwrap reports a child killed by signal N as 128 + N
        started = mode != "bwrap" or os.fstat(info.fileno()).st_size > 0
        stdout, out_cut, out_size = _read_capped(out, limits.max_output_chars)
        stderr, err_cut, err_size = _read_capped(err, limits.max_output_chars)
    if not started:
        why = stderr.strip()[-500:] or f"bwrap exited with {proc.returncode}"
        raise SandboxError(f"the sandbox did not start: {why}")
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=code,
        timed_out=timed_out,
        killed_by=_killed_by(code, timed_out, stderr, (out_size, err_size), limits),
        duration_s=round(duration, 4),
        stdout_truncated=out_cut,
        stderr_truncated=err_cut,
        mode=mode,
    )


def run_file(path: str | Path, limits: SandboxLimits | None = None, *, mode: str = "bwrap"):
    """``run_code`` on the contents of a ``.py`` file."""
    return run_code(Path(path).read_text(encoding="utf-8"), limits, mode=mode)


__all__ = [
    "INSTALL_HINT",
    "SandboxError",
    "SandboxUnavailable",
    "bwrap_status",
    "run_code",
    "run_file",
]
