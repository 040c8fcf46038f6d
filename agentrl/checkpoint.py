"""Atomic checkpoints and exact resume (DESIGN contract 6).

Layout under ``run_dir/checkpoints/``::

    rl_start.pt          policy weights when RL began (after the warm start): the reference
                         policy, and the frozen base of a LoRA run
    step_000004/         one checkpoint: one ``torch.save`` file per part, then COMPLETE
    step_000008/

A checkpoint is written into ``step_N.tmp/``: every file fsynced, the directory fsynced,
renamed to ``step_N/``, the parent fsynced, and only then the ``COMPLETE`` marker written (by
temp file, fsync, rename). A reader trusts a directory only if it holds the marker, so a
process killed at any moment leaves the previous checkpoint as the latest loadable one.
The files are pickles written by this process (``torch.load(weights_only=False)``): load only
run directories you trust.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

MARKER = "COMPLETE"
START_FILE = "rl_start.pt"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, obj: Any) -> None:
    """``torch.save`` to ``path`` and fsync it."""
    with path.open("wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def save_atomic(path: Path, obj: Any) -> None:
    """Write one file atomically: temp file, fsync, rename, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    _write_file(tmp, obj)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def step_dir(ckpt_dir: Path, step: int) -> Path:
    return Path(ckpt_dir) / f"step_{step:06d}"


def save_checkpoint(ckpt_dir: Path, step: int, parts: dict[str, Any], keep: int = 2) -> Path:
    """Write ``parts`` (name -> object) as the checkpoint after ``step`` RL steps; keep ``keep``."""
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = step_dir(ckpt_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name, obj in parts.items():
        _write_file(tmp / f"{name}.pt", obj)
    _fsync_dir(tmp)
    if final.exists():  # an older, possibly unmarked copy of the same step
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(ckpt_dir)
    marker_tmp = final / (MARKER + ".tmp")
    marker_tmp.write_text(f"{step}\n")
    with marker_tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    os.replace(marker_tmp, final / MARKER)
    _fsync_dir(final)
    _prune(ckpt_dir, keep)
    return final


def complete_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Marked checkpoint directories, oldest first."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    found = [
        p
        for p in ckpt_dir.glob("step_*")
        if p.is_dir() and not p.name.endswith(".tmp") and (p / MARKER).is_file()
    ]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    """The newest complete checkpoint, or None."""
    found = complete_checkpoints(ckpt_dir)
    return found[-1] if found else None


def _prune(ckpt_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` complete checkpoints, and unfinished leftovers."""
    done = complete_checkpoints(ckpt_dir)
    for p in done[: max(len(done) - keep, 0)]:
        shutil.rmtree(p, ignore_errors=True)
    for p in ckpt_dir.glob("step_*"):
        if p.is_dir() and not (p / MARKER).is_file():
            shutil.rmtree(p, ignore_errors=True)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """All parts of one complete checkpoint directory (name -> object)."""
    path = Path(path)
    if not (path / MARKER).is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {MARKER} marker)")
    return {
        f.stem: torch.load(f, map_location="cpu", weights_only=False)
        for f in sorted(path.glob("*.pt"))
    }


def capture_rng(trainer_rng: random.Random) -> dict[str, Any]:
    """RNG states of python (global and the trainer's), numpy and torch (CPU and CUDA)."""
    state = {
        "python": random.getstate(),
        "trainer": trainer_rng.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any], trainer_rng: random.Random) -> None:
    """Inverse of ``capture_rng``."""
    random.setstate(state["python"])
    trainer_rng.setstate(state["trainer"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def trainable_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that train (all of them, or only a LoRA adapter's), detached copies."""
    return {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}


def load_trainable_state(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load ``trainable_state`` output; every trainable parameter must be present."""
    params = dict(module.named_parameters())
    want = {n for n, p in params.items() if p.requires_grad}
    if set(state) != want:
        missing, extra = sorted(want - set(state)), sorted(set(state) - want)
        raise ValueError(
            f"checkpoint does not match the model: missing {missing[:5]}, unexpected {extra[:5]}"
        )
    with torch.no_grad():
        for n, t in state.items():
            params[n].copy_(t)


def file_position(path: Path) -> int:
    """Current size of an append-only log (0 if absent)."""
    return path.stat().st_size if path.exists() else 0


def truncate_file(path: Path, size: int) -> None:
    """Cut an append-only log back to ``size`` bytes (drops lines written after a checkpoint)."""
    if path.exists() and path.stat().st_size > size:
        with path.open("r+b") as fh:
            fh.truncate(size)


class TermSignal:
    """Context manager: SIGTERM sets ``requested`` instead of killing the process.

    The loop checks the flag after each step, writes a checkpoint and stops. Installed only
    in the main thread (signals cannot be handled elsewhere); the old handler comes back on exit.
    """

    def __init__(self) -> None:
        self.requested = False
        self._old: Any = None

    def _handle(self, signum, frame) -> None:
        self.requested = True

    def __enter__(self) -> TermSignal:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)
