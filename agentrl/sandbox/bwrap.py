"""The bubblewrap command line of a sandboxed run (``runner.bwrap_status`` probes bwrap).

The sandbox (``bwrap_argv``): every namespace unshared (user, pid, net, ipc, uts, cgroup), so
no network (only a private loopback), no view of host processes, and no nested user
namespaces; a read-only /usr (plus the /bin, /lib* links), no /etc, /home, /root or /work; a
fresh /proc and minimal /dev; a private size-capped /tmp; the user's code read-only in
/sandbox; an empty environment; uid/gid 65534 inside; ``--die-with-parent`` and a new session.
When the harness runs as root it drops to ``RUN_AS_UID`` before starting bwrap (see
``runner.py``), so the sandbox's uid maps to an unprivileged host uid (as root, uid 65534
*inside* would map to root *outside* and could read root's files through the binds).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from agentrl.sandbox.limits import SandboxLimits

RUN_AS_UID = 65534  # "nobody": the host uid a root harness drops to before starting bwrap
#: The config's way out; ``agentrl sandbox run`` swaps it for its own ``--unsafe`` flag.
UNSAFE_HINT = "set tools.sandbox.mode=unsafe to run code WITHOUT isolation"
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `apt-get install -y bubblewrap`; Fedora: "
    f"`dnf install bubblewrap`), or {UNSAFE_HINT}"
)
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def find_bwrap() -> str | None:
    """Path of the ``bwrap`` executable, or None."""
    return shutil.which("bwrap")


def sandbox_python(choice: str = "auto") -> str:
    """The interpreter run inside: ``choice``, or the system's ``/usr/bin/python3``."""
    if choice != "auto":
        return choice
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(sys.executable)


def _system_binds(python: str) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for path in _SYSTEM_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    real = os.path.realpath(python)
    if not real.startswith("/usr/"):  # an interpreter outside /usr: bind its installation
        prefix = str(Path(real).parent.parent)
        args += ["--ro-bind", prefix, prefix]
    return args


def bwrap_argv(
    bwrap: str, code_dir: str, limits: SandboxLimits, info_fd: int | None = None
) -> list[str]:
    """The full command: bwrap options, then the launcher running ``code_dir/main.py``.

    Pure function of its arguments (and of which system directories are links).
    """
    python = sandbox_python(limits.python)
    args = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--uid", "65534",
        "--gid", "65534",
        "--hostname", "sandbox",
        "--die-with-parent",
        "--new-session",
        *_system_binds(python),
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(limits.tmp_size_mb * 1024 * 1024),
        "--tmpfs", "/tmp",
        "--ro-bind", code_dir, "/sandbox",
        "--chdir", "/tmp",
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "HOME", "/tmp",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
    ]  # fmt: skip
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    launch = json.dumps(limits.rlimits())
    return [*args, python, "-I", "-B", "/sandbox/launcher.py", launch, python, "/sandbox/main.py"]
