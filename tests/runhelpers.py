"""Config overrides shared by the tests that train the tiny fixture model for a few steps."""

from __future__ import annotations

from pathlib import Path


def tiny_run_overrides(tiny_dir: Path, run: Path) -> list[str]:
    """The smallest weather run: no warm start or evaluation, one group of 2, short turns.

    ``max_total_tokens`` leaves room after the weather prompt (~400 tokens with the tiny
    tokenizer) for a few generated tokens.
    """
    return [
        f"model.name={tiny_dir}",
        f"train.run_dir={run}",
        "train.eval_episodes=0",
        "train.warmstart_demos=0",
        "task.max_turns=2",
        "rollout.group_size=2",
        "rollout.groups_per_step=1",
        "rollout.max_new_tokens=6",
        "rollout.max_total_tokens=480",
    ]
