"""make / register / list_envs, and check_env on good and broken environments."""

from __future__ import annotations

import random

import pytest

import agentrl.envs as envs
from agentrl.envs import TaskFamily, TaskInstance, ToolTaskEnv, check_env
from agentrl.envs.registry import _REGISTRY
from agentrl.tools.registry import tool
from agentrl.types import ToolCall


class EchoFamily(TaskFamily):
    """Call echo(word) and answer with the word."""

    name = "echo"
    levels = (1,)

    def __init__(self, words: tuple[str, ...] = ("apple", "pear")) -> None:
        self.words = words

    def tools(self, instance):
        @tool
        def echo(word: str) -> dict:
            """Echo a word.

            Args:
                word: The word.
            """
            return {"echo": word}

        return [echo]

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        return self.instance(rng.choice(self.words), level)

    @staticmethod
    def instance(word: str, level: int) -> TaskInstance:
        return TaskInstance(
            f"echo-{word}",
            level,
            f"Echo {word}.",
            {"word": word},
            [ToolCall("echo", {"word": word})],
        )

    def check_answer(self, instance, answer):
        return answer.strip() == instance.data["word"]

    def reference_answer(self, instance, results):
        return results[0]["echo"]


@pytest.fixture
def clean_registry():
    saved = dict(_REGISTRY)
    yield
    _REGISTRY.clear()
    _REGISTRY.update(saved)


def test_make_unknown_id_lists_known_ids():
    with pytest.raises(ValueError, match=r"no environment registered as 'wether'.*weather"):
        envs.make("wether")


def test_weather_is_registered():
    assert "weather" in envs.list_envs()
    env = envs.make("weather", max_turns=8, fault_rate=0.0, seed=3)
    assert isinstance(env, ToolTaskEnv) and env.max_turns == 8 and env.family.fault_rate == 0.0


def test_system_prompt_replaces_the_familys_in_episodes_and_warm_start_demos():
    from agentrl.config import Config
    from agentrl.train.build import collect_demos, env_factory

    told = "You are a weather assistant. Give every city's temperature."
    plain = envs.make("weather").reset(seed=5, options={"level": 3})[0]
    assert plain[0] == {"role": "system", "content": envs.make("weather").family.system_prompt}
    env = envs.make("weather", system_prompt=told, fault_rate=0.0)
    messages = env.reset(seed=5, options={"level": 3})[0]
    assert messages[0] == {"role": "system", "content": told}
    assert messages[1] == plain[1]  # the same task, only the instructions differ
    cfg = Config.model_validate({"task": {"env_kwargs": {"system_prompt": told}}})
    demos = collect_demos(env_factory(cfg), 3, [1, 2, 3], seed0=0)
    assert [d[0][0]["content"] for d in demos] == [told] * 3
    assert demos[2][0][-1]["role"] == "assistant"  # the reference episode ran to its answer
    for bad in ("", "   ", 7):
        with pytest.raises(ValueError, match="system_prompt must be a non-empty string"):
            envs.make("weather", system_prompt=bad)


def test_register_family_class_with_defaults_and_overrides(clean_registry):
    envs.register("echo-test", EchoFamily, words=("kiwi",), max_turns=3)
    env = envs.make("echo-test")
    assert env.max_turns == 3 and env.family.words == ("kiwi",)
    assert envs.make("echo-test", max_turns=4).max_turns == 4
    assert env.reset(seed=0)[0] == [{"role": "user", "content": "Echo kiwi."}]
    assert check_env(env) == {"episodes": 3, "success_rate": 1.0}
    with pytest.warns(UserWarning, match="overriding"):
        envs.register("echo-test", lambda **kw: ToolTaskEnv(EchoFamily(), **kw))
    with pytest.raises(TypeError, match="factory must be callable"):
        envs.register("bad", 42)


def test_check_env_weather_all_levels():
    report = check_env(envs.make("weather"), seeds=range(4))
    assert report == {"episodes": 12, "success_rate": 1.0}


class WrongAnswerFamily(EchoFamily):
    def reference_answer(self, instance, results):
        return "banana"


class NondeterministicFamily(EchoFamily):
    """Ignores the seed: every reset asks for a new word, so two resets never match."""

    def __init__(self) -> None:
        super().__init__()
        self.draws = 0

    def sample(self, rng, level):
        self.draws += 1
        return self.instance(f"w{self.draws}", level)


class BadObsEnv(ToolTaskEnv):
    def step(self, action_text):
        obs, reward, term, trunc, info = super().step(action_text)
        return obs, int(reward), term, trunc, info


def test_check_env_catches_broken_envs():
    with pytest.raises(AssertionError, match="reference solver failed"):
        check_env(ToolTaskEnv(WrongAnswerFamily()))
    with pytest.raises(AssertionError, match="not deterministic"):
        check_env(ToolTaskEnv(NondeterministicFamily()))
    with pytest.raises(AssertionError, match="reward must be a float"):
        check_env(BadObsEnv(EchoFamily()))
