"""The ``tools`` config section: how ToolGuard runs tools (defaults, then per tool).

Precedence for one tool: these defaults < the tool's own ``Tool.policy`` < ``per_tool[name]``.
``resolve_policy`` merges them into a ``Policy`` with every field set.

YAML example::

    tools:
      mode: inprocess          # cheap pure tools run in the calling process
      per_tool:
        run_python: {mode: worker, timeout_floor_s: 8}
        search: {fallback: {kind: message, message: "Search is down; answer from memory."}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Mode = Literal["inprocess", "worker"]
FALLBACK_TRIGGERS = ("timeout", "exception", "circuit_open")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Fallback(_Section):
    """What the model gets instead of a failure: a default value, another tool, or a message."""

    kind: Literal["default", "tool", "message"] = Field(description="Which kind of fallback.")
    value: Any = Field(None, description="kind=default: the value returned instead.")
    tool: str | None = Field(None, description="kind=tool: the tool called with the same args.")
    message: str | None = Field(None, description="kind=message: the error message shown.")
    on: list[Literal["timeout", "exception", "circuit_open"]] = Field(
        default_factory=lambda: list(FALLBACK_TRIGGERS),
        description="Failure classes that trigger it (harness faults never do).",
    )

    @model_validator(mode="after")
    def _needs_its_field(self) -> Fallback:
        if self.kind == "tool" and not self.tool:
            raise ValueError("fallback kind 'tool' needs 'tool' (the other tool's name)")
        if self.kind == "message" and not self.message:
            raise ValueError("fallback kind 'message' needs 'message'")
        return self


class ToolPolicy(_Section):
    """Per-tool overrides; a field left unset takes the section default."""

    mode: Mode | None = None
    timeout_base: float | None = Field(None, gt=0)
    timeout_floor_s: float | None = Field(None, gt=0)
    timeout_ceiling_s: float | None = Field(None, gt=0)
    timeout_initial_s: float | None = Field(None, gt=0)
    breaker_failures: int | None = Field(None, ge=1)
    breaker_cooldown_s: float | None = Field(None, ge=0)
    coerce_arguments: bool | None = None
    max_result_chars: int | None = Field(None, ge=16)
    fallback: Fallback | None = None


class SandboxSettings(_Section):
    """Limits of the code-interpreter sandbox (``agentrl.sandbox``)."""

    mode: Literal["bwrap", "unsafe"] = Field(
        "bwrap", description="'bwrap' (refuses if bubblewrap is missing) or 'unsafe' (no sandbox)."
    )
    timeout_s: float = Field(5.0, gt=0, description="Wall-clock limit; the whole tree is killed.")
    cpu_s: int | None = Field(None, ge=1, description="CPU seconds (default: timeout + 1).")
    memory_mb: int = Field(512, ge=32, description="Address-space limit (RLIMIT_AS).")
    file_size_mb: int = Field(16, ge=1, description="Largest file written, stdout included.")
    open_files: int = Field(64, ge=8, description="RLIMIT_NOFILE.")
    processes: int = Field(32, ge=1, description="RLIMIT_NPROC inside the sandbox.")
    tmp_size_mb: int = Field(64, ge=1, description="Size of the private /tmp.")
    max_output_chars: int = Field(8_000, ge=64, description="stdout / stderr kept, each.")
    python: str = Field("auto", description="Interpreter inside the sandbox ('auto': system).")

    def limits(self) -> Any:
        """The ``agentrl.sandbox.SandboxLimits`` these settings describe."""
        from agentrl.sandbox.limits import SandboxLimits

        return SandboxLimits(**self.model_dump(exclude={"mode"}))


class ToolsConfig(_Section):
    """How tools run: process mode, dynamic timeouts, circuit breaker, fallbacks, sandbox."""

    mode: Mode = Field("inprocess", description="'inprocess' (cheap pure tools) or 'worker'.")
    workers: int = Field(4, ge=1, description="Worker processes in the shared pool.")
    timeout_base: float = Field(
        3.0, gt=0, description="Timeout = base x (mean + std of recent latencies), clamped."
    )
    timeout_floor_s: float = Field(1.0, gt=0, description="Smallest timeout (seconds).")
    timeout_ceiling_s: float = Field(30.0, gt=0, description="Largest timeout (seconds).")
    timeout_initial_s: float | None = Field(
        None, gt=0, description="Timeout before any latency is known (default: the ceiling)."
    )
    timeout_window: int = Field(50, ge=2, description="Recent latencies kept per tool.")
    breaker_failures: int = Field(5, ge=1, description="Consecutive failures that open it.")
    breaker_cooldown_s: float = Field(30.0, ge=0, description="Open -> half-open after this.")
    breaker_counts: list[Literal["timeout", "exception", "worker_crash", "sandbox_error"]] = Field(
        default_factory=lambda: ["timeout", "worker_crash", "sandbox_error"],
        description="Failure classes that count toward opening (add 'exception' if wanted).",
    )
    coerce_arguments: bool = Field(False, description='Safe coercion ("3" -> 3), counted.')
    max_result_chars: int = Field(4_000, ge=16, description="Tool output cap (characters).")
    stop_on_timeout: bool = Field(
        False, description="End the episode ('tool_timeout') on a timeout instead of going on."
    )
    fallback: Fallback | None = Field(None, description="Fallback for every tool.")
    per_tool: dict[str, ToolPolicy] = Field(default_factory=dict)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)

    @model_validator(mode="after")
    def _floor_below_ceiling(self) -> ToolsConfig:
        if self.timeout_floor_s > self.timeout_ceiling_s:
            raise ValueError(
                f"timeout_floor_s ({self.timeout_floor_s}) > timeout_ceiling_s "
                f"({self.timeout_ceiling_s})"
            )
        return self


@dataclass(frozen=True)
class Policy:
    """The settings one tool runs under, every field resolved."""

    mode: str
    timeout_base: float
    timeout_floor_s: float
    timeout_ceiling_s: float
    timeout_initial_s: float
    breaker_failures: int
    breaker_cooldown_s: float
    coerce_arguments: bool
    max_result_chars: int
    fallback: Fallback | None


def resolve_policy(
    settings: ToolsConfig, name: str, tool_policy: dict[str, Any] | None = None
) -> Policy:
    """Merge section defaults, the tool's own policy and ``per_tool[name]`` (in that order)."""
    merged: dict[str, Any] = {
        k: getattr(settings, k) for k in Policy.__dataclass_fields__ if k != "timeout_initial_s"
    }
    merged["timeout_initial_s"] = settings.timeout_initial_s
    layers = [tool_policy or {}, settings.per_tool.get(name)]
    for layer in layers:
        if layer is None:
            continue
        try:
            data = layer if isinstance(layer, ToolPolicy) else ToolPolicy.model_validate(layer)
        except ValidationError as err:
            raise ValueError(f"tool {name!r}: bad policy: {err.errors()[0]['msg']}") from None
        merged.update({k: v for k, v in data.model_dump().items() if v is not None})
        if data.fallback is not None:
            merged["fallback"] = data.fallback
    floor, ceiling = merged["timeout_floor_s"], merged["timeout_ceiling_s"]
    if floor > ceiling:
        raise ValueError(f"tool {name!r}: timeout_floor_s {floor} > timeout_ceiling_s {ceiling}")
    if merged["timeout_initial_s"] is None:
        merged["timeout_initial_s"] = ceiling
    return Policy(**merged)
