"""Fixtures of the multi-agent tests."""

import sys

import pytest

from agentrl.envs import registry


@pytest.fixture
def duo_registered():
    """``meeting_duo`` registered for one test only (other tests loop over every env id)."""
    saved = dict(registry._REGISTRY)
    sys.modules.pop("agentrl.multiagent.envs", None)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)
    sys.modules.pop("agentrl.multiagent.envs", None)


@pytest.fixture
def duo_step_config(tiny_dir):
    """A builder of one-step meeting_duo training configs on the tiny model (2 plays of one
    level-1 instance, 8-token turns), ``run`` its run directory, ``extra`` more overrides."""
    from agentrl.config import build_config

    def build(run, *extra: str):
        return build_config({}, ["task.env=meeting_duo", "task.imports=[agentrl.multiagent.envs]",
                                 f"model.name={tiny_dir}", f"train.run_dir={run}",
                                 "train.steps=1", "train.eval_episodes=0",
                                 "train.warmstart_demos=1", "train.warmstart_epochs=1",
                                 "train.warmstart_levels=[1]", "task.levels=[1]",
                                 "rollout.group_size=2", "rollout.groups_per_step=1",
                                 "rollout.max_new_tokens=8", "rollout.max_total_tokens=1200",
                                 "train.save_model=false", "train.general_check=false",
                                 *extra])  # fmt: skip

    return build
