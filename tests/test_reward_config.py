"""Process-reward weights (``reward.progress``, ``reward.reask``) come from the config."""

from __future__ import annotations

import pytest

import agentrl.envs as envs
from agentrl.config import ConfigError, load_config
from agentrl.envs.reference import format_call
from agentrl.envs.task import TaskInstance
from agentrl.envs.tasks.shaped import ShapedTaskEnv
from agentrl.envs.tasks.weather import WeatherFamily
from agentrl.types import ToolCall


def call(name: str, **arguments) -> str:
    return format_call(ToolCall(name, arguments))


def half_episode(env_id: str, overrides: list[str], level: int = 1):
    """The reference's first turn only, then cut off: ``progress`` is partial."""
    cfg = load_config(overrides=overrides)
    env = envs.make(env_id, reward_weights=cfg.reward.weights())  # as train's env_factory does
    env.reset(seed=3, options={"level": level})
    env.step(env.reference_action())
    return env.finish("length")


def test_defaults_are_the_old_constants_and_change_nothing():
    cfg = load_config()
    assert (cfg.reward.progress, cfg.reward.reask) == (0.3, -0.1)
    for env_id in ("meeting", "shop"):
        plain = envs.make(env_id)
        _, info = envs.run_reference_episode(plain, seed=1, level=2)
        configured = envs.make(env_id, reward_weights=cfg.reward.weights())
        _, again = envs.run_reference_episode(configured, seed=1, level=2)
        assert again["reward"].to_dict() == info["reward"].to_dict()
        assert (info["reward"].weights["progress"], info["reward"].weights["reask"]) == (0.3, -0.1)


@pytest.mark.parametrize(("env_id", "progress"), [("meeting", 0.5), ("shop", 0.2)])
def test_set_reward_progress_changes_the_progress_contribution(env_id, progress):
    base = half_episode(env_id, [])
    moved = half_episode(env_id, ["reward.progress=0.5"])
    assert base.layers["progress"] == moved.layers["progress"] == progress
    assert moved.weights["progress"] == 0.5 and base.weights["progress"] == 0.3
    assert moved.total - base.total == pytest.approx((0.5 - 0.3) * progress, abs=1e-12)
    assert {k: v for k, v in moved.weights.items() if k != "progress"} == {
        k: v for k, v in base.weights.items() if k != "progress"
    }


def test_set_reward_reask_weighs_the_reask_count():
    cfg = load_config(overrides=["reward.reask=-1.5"])
    env = envs.make("shop", reward_weights=cfg.reward.weights())
    env.reset(seed=0, options={"level": 3})
    env.step(call("ask_user", question="What colour?"))  # the colour was in the request: a re-ask
    breakdown = env.finish("length")
    assert breakdown.layers["reask"] == 1.0 and breakdown.weights["reask"] == -1.5


def test_an_unknown_weight_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"reward.*speed.*allowed here: .*progress, reask"):
        load_config(overrides=["reward.speed=1.0"])
    with pytest.raises(ValueError, match=r"unknown reward weight 'speed'; allowed: .*, reask"):
        envs.make("meeting", reward_weights={"speed": 1.0})


class Scored(WeatherFamily):
    """Weather with process layers: one the config weighs, one it does not know."""

    layers: dict = {}

    def process_layers(self, instance: TaskInstance, call_log: list[dict]) -> dict:
        return self.layers


def test_a_family_layer_without_a_config_weight_needs_its_own():
    env = ShapedTaskEnv(Scored(), reward_weights={"progress": 0.7})
    env.family.layers = {"progress": 0.5, "tidy": (0.25, 2.0)}
    env.reset(seed=0)
    breakdown = env.finish("length")
    assert (breakdown.weights["progress"], breakdown.weights["tidy"]) == (0.7, 0.25)
    assert breakdown.total == pytest.approx(0.7 * 0.5 + 0.25 * 2.0)  # nothing else scored
    env.family.layers = {"tidy": 2.0}
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"process layer 'tidy' has no reward weight"):
        env.finish("length")
