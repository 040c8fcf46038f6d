"""A run whose output goes to a log file (not a terminal) still shows its progress: the warm
start prints plain lines as it goes and every RL step prints one line with its success, reward,
KL and seconds (a live rich bar would only be drawn when the run ends)."""

from __future__ import annotations

import io
import re

from rich.console import Console
from runhelpers import tiny_run_overrides

from agentrl.config import build_config
from agentrl.train import train


def test_a_run_logged_to_a_file_prints_each_step(tiny_dir, tmp_path, capsys):
    overrides = [
        *tiny_run_overrides(tiny_dir, tmp_path / "run"),
        "train.steps=2",
        "train.warmstart_demos=2",
        "train.warmstart_epochs=1",
        "train.general_check=false",
        "rollout.max_total_tokens=1024",  # whole demonstrations: the warm start has rows
    ]
    log = io.StringIO()
    train(build_config({}, overrides), console=Console(file=log, width=200), progress=True)
    steps = re.findall(r"GRPO step (\d)/2: success [\d.]+ reward -?[\d.]+ kl -?[\d.]+, \d+ s",
                       log.getvalue())  # fmt: skip
    assert steps == ["1", "2"]
    warm = [line for line in capsys.readouterr().out.splitlines() if "steps," in line]
    assert warm and warm[-1].startswith("warm start loss ") and " 1/1 steps, " in warm[-1]
