"""A run whose output goes to a log file (not a terminal) still shows its progress: the warm
start prints plain lines as it goes and every RL step prints one line with its success, reward,
KL, seconds and the rollout's share of them (a live rich bar would only be drawn when the run
ends)."""

from __future__ import annotations

import io
import re

import pytest
import torch
from rich.console import Console
from runhelpers import tiny_run_overrides

from agentrl.checkpoint import START_FILE
from agentrl.config import build_config
from agentrl.train import train
from agentrl.train.run import Run


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
    steps = re.findall(r"GRPO step (\d)/2: success [\d.]+ reward -?[\d.]+ kl -?[\d.]+, \d+ s "
                       r"\(rollout \d+ s\)", log.getvalue())  # fmt: skip
    assert steps == ["1", "2"]
    warm = [line for line in capsys.readouterr().out.splitlines() if "steps," in line]
    assert warm and warm[-1].startswith("warm start loss ") and " 1/1 steps, " in warm[-1]


def test_the_warm_start_is_saved_before_the_evaluation_before_rl(tiny_dir, tmp_path,
                                                                 monkeypatch):  # fmt: skip
    """A user who stops a long evaluation before RL keeps the warm start: ``rl_start.pt`` is on
    disk, holding the very weights being evaluated, before the evaluation begins."""
    seen = {}

    def stopped_evaluation(self, generator, *args, **kwargs):
        path = self.ckpt_dir / START_FILE
        seen["saved"] = torch.load(path) if path.exists() else None
        seen["evaluated"] = {k: v.clone() for k, v in generator.model.state_dict().items()}
        raise KeyboardInterrupt  # the user stops it

    monkeypatch.setattr(Run, "evaluate", stopped_evaluation)
    overrides = [
        *tiny_run_overrides(tiny_dir, tmp_path / "run"),
        "train.steps=0",
        "train.warmstart_demos=2",
        "train.warmstart_epochs=1",
        "train.eval_episodes=2",
        "train.general_check=false",
        "rollout.max_total_tokens=1024",
    ]
    with pytest.raises(KeyboardInterrupt):
        train(build_config({}, overrides), console=Console(file=io.StringIO()), progress=False)
    assert seen["saved"] is not None, "the warm start was not saved before the evaluation"
    assert seen["saved"].keys() == seen["evaluated"].keys()
    assert all(torch.equal(seen["saved"][k], v) for k, v in seen["evaluated"].items())
