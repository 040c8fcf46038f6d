"""Facts about the machine a run is on: the memory this process may still use."""

from __future__ import annotations

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
