"""Facts about the machine a run is on: the memory this process may still use, and whether
bf16 matrix products are native here; giving freed heap memory back to the system."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from pathlib import Path

import torch


def available_memory(device: torch.device | str = "cpu") -> int:
    """Bytes free for this process: CUDA ``mem_get_info`` (plus PyTorch's cached free blocks);
    on CPU ``MemAvailable`` of /proc/meminfo, capped by the cgroup's limit."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    free = _meminfo_available()
    cap = _cgroup_available()
    return min(free, cap) if cap is not None else free


def _meminfo_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _cgroup_available(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """limit - (usage - inactive file cache) of the cgroup (v2, else v1), None without a limit."""
    for limit_f, usage_f, stat_f, key in (
        ("memory.max", "memory.current", "memory.stat", "inactive_file"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat",
         "total_inactive_file"),
    ):  # fmt: skip
        try:
            limit = (root / limit_f).read_text().strip()
            usage = int((root / usage_f).read_text())
        except (OSError, ValueError):
            continue
        if limit == "max" or int(limit) >= 1 << 60:
            return None
        inactive = 0
        try:
            for line in (root / stat_f).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    inactive = int(value)
        except (OSError, ValueError):
            pass
        return max(0, int(limit) - (usage - inactive))
    return None


BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # CPU flags of native bf16 matrix products


def native_bf16(device: torch.device | str = "cpu") -> bool:
    """Whether bf16 matrix products are fast here: a CUDA device that supports bf16, or a CPU
    with AMX-BF16 or AVX512-BF16 (there bf16 matmuls run 2-4x faster than fp32; without
    them, several times slower). ``AGENTRL_NATIVE_BF16=0`` or ``1`` overrides the check."""
    forced = os.environ.get("AGENTRL_NATIVE_BF16", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device.type == "cpu" and bool(set(BF16_FLAGS) & _cpu_flags())


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def memory_metrics() -> dict[str, float]:
    """This process's resident memory now and its peak so far, in GB (``system/rss_gb``,
    ``system/peak_rss_gb``, from /proc/self/status); empty where there is no /proc."""
    names = {"VmRSS": "system/rss_gb", "VmHWM": "system/peak_rss_gb"}
    out: dict[str, float] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in names:
                out[names[key]] = int(value.split()[0]) / 2**20  # kB -> GB
    except (OSError, ValueError, IndexError):
        return {}
    return out


def release_free_memory() -> bool:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim(0)``); False
    where the C library has no such call (macOS, musl).

    PyTorch's CPU tensors live in the C heap, and glibc keeps what they free for reuse. With
    tensors of many sizes (a warm start, a rollout's KV cache, an update's micro-batches) the
    kept memory grows step after step: a real-model run at 4,096 tokens held 15.9 GB after its
    warm start, 5.8 GB of it in use (measured by calling ``malloc_trim`` in the running
    process), and a library run was killed at 24 GB in its fifth step. Called between the
    phases of a run.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None
