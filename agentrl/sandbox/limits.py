"""What a sandboxed run may use, and what it did: ``SandboxLimits`` and ``SandboxResult``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run (set by the harness, never by the code).

    ``timeout_s`` is the wall clock after which the whole process tree is SIGKILLed;
    ``cpu_s`` (default ``ceil(timeout_s) + 1``) is RLIMIT_CPU; ``memory_mb`` is RLIMIT_AS;
    ``file_size_mb`` is RLIMIT_FSIZE (stdout and stderr are files, so it caps them too);
    ``open_files`` RLIMIT_NOFILE; ``processes`` RLIMIT_NPROC (counted per sandbox: each has its
    own user namespace); ``tmp_size_mb`` the private /tmp; ``max_output_chars`` the stdout /
    stderr text returned, each; ``python`` the interpreter run inside ('auto': the system's).
    """

    timeout_s: float = 5.0
    cpu_s: int | None = None
    memory_mb: int = 512
    file_size_mb: int = 16
    open_files: int = 64
    processes: int = 32
    tmp_size_mb: int = 64
    max_output_chars: int = 8_000
    python: str = "auto"

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "file_size_mb", "open_files", "processes"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}")
        if self.cpu_s is not None and self.cpu_s < 1:
            raise ValueError(f"SandboxLimits.cpu_s must be >= 1, got {self.cpu_s!r}")

    def rlimits(self) -> dict[str, tuple[int, int]]:
        """``resource`` limit name -> (soft, hard), as the launcher sets them."""
        cpu = self.cpu_s if self.cpu_s is not None else int(self.timeout_s + 0.999) + 1
        mb = 1024 * 1024
        return {
            "RLIMIT_CPU": (cpu, cpu + 1),
            "RLIMIT_AS": (self.memory_mb * mb, self.memory_mb * mb),
            "RLIMIT_FSIZE": (self.file_size_mb * mb, self.file_size_mb * mb),
            "RLIMIT_NOFILE": (self.open_files, self.open_files),
            "RLIMIT_NPROC": (self.processes, self.processes),
            "RLIMIT_CORE": (0, 0),
        }


@dataclass(frozen=True)
class SandboxResult:
    """What one run did. ``exit_code`` is negative for a signal (``-9``: SIGKILL).

    ``killed_by``: ``None``, ``"wall_clock"``, ``"cpu_limit"``, ``"memory_limit"``,
    ``"output_limit"`` (a file / stdout reached ``file_size_mb``) or ``"signal:<NAME>"``
    (memory and output are read from the evidence: MemoryError / EFBIG / a full file).
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    killed_by: str | None
    duration_s: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    mode: str = "bwrap"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
