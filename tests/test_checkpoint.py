"""Atomic checkpoints: marker last, keep the newest K, leftovers ignored; RNG round trip."""

import random

import numpy as np
import pytest
import torch

from agentrl.checkpoint import (
    MARKER,
    capture_rng,
    complete_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    restore_rng,
    save_atomic,
    save_checkpoint,
    truncate_file,
)


def test_save_keeps_newest_k_and_marks_last(tmp_path):
    for step in (2, 4, 6):
        out = save_checkpoint(tmp_path, step, {"state": {"step": step}}, keep=2)
        assert (out / MARKER).read_text() == f"{step}\n"
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step_000004", "step_000006"]
    assert load_checkpoint(latest_checkpoint(tmp_path))["state"] == {"step": 6}


def test_unmarked_and_temp_directories_are_never_latest(tmp_path):
    save_checkpoint(tmp_path, 2, {"state": {"step": 2}}, keep=3)
    (tmp_path / "step_000004.tmp").mkdir()  # killed while writing files
    renamed = tmp_path / "step_000006"  # killed between rename and marker
    renamed.mkdir()
    torch.save({"step": 6}, renamed / "state.pt")
    assert latest_checkpoint(tmp_path).name == "step_000002"
    with pytest.raises(FileNotFoundError, match="no COMPLETE marker"):
        load_checkpoint(renamed)
    save_checkpoint(tmp_path, 8, {"state": {"step": 8}}, keep=3)  # the next save cleans up
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000002", "step_000008"]


def test_save_atomic_replaces_whole_file(tmp_path):
    path = tmp_path / "sub" / "x.pt"
    save_atomic(path, {"a": 1})
    save_atomic(path, {"a": 2})
    assert torch.load(path) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["x.pt"]


def test_rng_round_trip_reproduces_every_generator():
    rng = random.Random(3)
    state = capture_rng(rng)
    first = (random.random(), rng.random(), np.random.rand(), torch.rand(2))
    restore_rng(state, rng)
    second = (random.random(), rng.random(), np.random.rand(), torch.rand(2))
    assert first[:3] == second[:3] and torch.equal(first[3], second[3])


def test_truncate_file_drops_lines_after_a_position(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 0}\n{"step": 1}\n')
    truncate_file(log, len('{"step": 0}\n'))
    assert log.read_text() == '{"step": 0}\n'
    truncate_file(log, 10_000)  # never grows a file
    assert log.read_text() == '{"step": 0}\n'
