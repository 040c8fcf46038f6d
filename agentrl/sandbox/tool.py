"""``run_python(code)``: the code-interpreter tool (ToRL) over the sandbox.

The tool returns ``{"stdout", "stderr", "exit_code"}``; a run stopped by the wall clock adds
``"error": "timeout"`` (so it is counted as a timeout), one killed by a limit adds
``"killed_by"``. The limits come from the harness (``SandboxLimits``), never from the call.
A sandbox that cannot start raises ``SandboxError``: a harness fault (episode
``harness_error``), not the model's failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentrl.sandbox.limits import SandboxLimits
from agentrl.sandbox.runner import MODES, run_code
from agentrl.tools.registry import Tool, tool_from_schema

DESCRIPTION = (
    "Run a Python 3 program in a sandbox and return its stdout, stderr and exit code. "
    "Use print() to see values. No network, no files outside /tmp."
)
PARAMETERS = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "The Python program to run."}},
    "required": ["code"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class RunPython:
    """The tool function (a picklable callable, so it can run in a worker process)."""

    limits: SandboxLimits
    mode: str = "bwrap"

    def __call__(self, code: str) -> dict[str, Any]:
        result = run_code(code, self.limits, mode=self.mode)
        out: dict[str, Any] = {
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_code": result.exit_code,
        }
        if result.timed_out:
            out["error"] = "timeout"
            out["message"] = f"The program was stopped after {self.limits.timeout_s:g} s."
        if result.killed_by and not result.timed_out:
            out["killed_by"] = result.killed_by
        return out


def python_tool(
    limits: SandboxLimits | None = None,
    *,
    mode: str = "bwrap",
    name: str = "run_python",
    policy: dict[str, Any] | None = None,
) -> Tool:
    """The ``run_python`` tool. By default it runs in a worker process with a guard timeout
    well above the sandbox's own wall clock (the sandbox kills the code first; the guard
    only catches a sandbox that hangs)."""
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {MODES}, got {mode!r}")
    limits = limits or SandboxLimits()
    slack = limits.timeout_s + 5.0
    default_policy = {
        "mode": "worker",
        "timeout_floor_s": slack,
        "timeout_initial_s": slack + 5.0,
        "timeout_ceiling_s": slack + 25.0,
    }
    return tool_from_schema(
        name, DESCRIPTION, PARAMETERS, RunPython(limits, mode), {**default_policy, **(policy or {})}
    )
