"""Sandboxed execution of model-written Python (the ToRL code interpreter).

``run_code(code, SandboxLimits(timeout_s=5))`` -> ``SandboxResult`` (stdout, stderr, exit
code, timed_out, killed_by, duration). bubblewrap isolates each run (no network, read-only
system, private /tmp, unprivileged uid, rlimits, wall-clock kill of the whole tree); see
``bwrap.py`` and ``runner.py``. ``python_tool()`` wraps it as the ``run_python`` tool.
"""

from agentrl.sandbox.bwrap import INSTALL_HINT, find_bwrap
from agentrl.sandbox.limits import SandboxLimits, SandboxResult
from agentrl.sandbox.runner import (
    SandboxError,
    SandboxUnavailable,
    bwrap_status,
    run_code,
    run_file,
)
from agentrl.sandbox.tool import python_tool

__all__ = [
    "INSTALL_HINT",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailable",
    "bwrap_status",
    "find_bwrap",
    "python_tool",
    "run_code",
    "run_file",
]
