"""``env.snapshot()`` / ``env.restore()``: round trips for every built-in family, on the same
env and on a fresh one, wrappers included; non-deterministic tools fail loudly."""

import random

import pytest

from agentrl.envs import TaskFamily, TaskInstance, ToolTaskEnv, list_envs, make
from agentrl.envs.snapshot import SnapshotMismatch, SnapshotUnsupported
from agentrl.tools.registry import tool
from agentrl.types import ToolCall


def _make(env_id: str, **kw):
    if env_id == "math":
        pytest.importorskip("reasoning_gym")
    if env_id == "arith_code":
        from agentrl.sandbox import bwrap_status

        ok, why = bwrap_status()
        if not ok:
            pytest.skip(f"arith_code runs its tool in bubblewrap: {why}")
    return make(env_id, max_turns=12, **kw)


def _play_to_end(env) -> tuple[list, float]:
    for _ in range(env.max_turns + 1):
        _, _, terminated, truncated, info = env.step(env.reference_action())
        if terminated or truncated:
            return [dict(m) for m in env.messages], info["reward"].total
    raise AssertionError("no end")


@pytest.mark.parametrize("env_id", list_envs())
@pytest.mark.parametrize("last_actions", [0, 3])
def test_restore_continues_exactly_like_the_original(env_id, last_actions):
    level = 2
    env = _make(env_id, last_actions=last_actions)
    env.reset(seed=11, options={"level": level})
    env.step(env.reference_action())  # one call made: state to carry (cart, faults, log)
    snap = env.snapshot()
    at_snapshot = [dict(m) for m in env.messages]
    original, reward = _play_to_end(env)
    assert snap.turn == 1
    for target in (env, _make(env_id, last_actions=last_actions)):  # same env, fresh env
        assert target.restore(snap) == at_snapshot
        assert _play_to_end(target) == (original, reward)


def test_branches_from_one_snapshot_are_independent():
    env = make("shop", max_turns=12)
    env.reset(seed=3, options={"level": 1})
    env.step(env.reference_action())
    snap = env.snapshot()
    a, b = make("shop", max_turns=12), make("shop", max_turns=12)
    a.restore(snap)
    b.restore(snap)
    _, reward_a = _play_to_end(a)  # a checks out; b's session must not see a's order
    b.step("I could not place the order.")
    assert a.termination == "success" and b.termination == "failure"
    assert reward_a > b.breakdown.total


def test_snapshot_of_an_ended_episode_or_none_is_refused():
    env = make("weather")
    with pytest.raises(SnapshotUnsupported, match="reset first"):
        env.snapshot()
    env.reset(seed=1)
    env.step("Paris is warm.")
    with pytest.raises(SnapshotUnsupported, match="ended"):
        env.snapshot()


class _Clock(TaskFamily):
    """A family whose tool answers differently every call (a clock, a live service)."""

    name, levels = "clock", (1,)

    def __init__(self, replayable=True):
        self.replayable = replayable
        self.ticks = 0

    def tools(self, instance):
        @tool
        def now() -> dict:
            """The time."""
            self.ticks += 1
            return {"tick": self.ticks}

        return [now]

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        return TaskInstance("clock-1", 1, "What time is it?", {}, [ToolCall("now", {})])

    def check_answer(self, instance, answer):
        return True

    def reference_answer(self, instance, results):
        return "now"


def test_non_deterministic_tools_fail_loudly_or_opt_out():
    env = ToolTaskEnv(_Clock())
    env.reset(seed=0)
    env.step(env.reference_action())
    snap = env.snapshot()
    with pytest.raises(SnapshotMismatch, match="not deterministic"):
        env.restore(snap)
    opted_out = ToolTaskEnv(_Clock(replayable=False))
    opted_out.reset(seed=0)
    with pytest.raises(SnapshotUnsupported, match="replayable = False"):
        opted_out.snapshot()
