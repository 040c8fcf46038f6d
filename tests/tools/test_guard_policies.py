"""Dynamic timeouts, the circuit breaker, policies (defaults < tool < config), fallbacks,
coercion and validation messages: hand-computed numbers, a fake clock, no sleeping."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from agentrl.tools.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker
from agentrl.tools.errors import HarnessFault
from agentrl.tools.guard import ToolGuard
from agentrl.tools.health import HealthBoard, dynamic_timeout
from agentrl.tools.registry import ToolRegistry, tool
from agentrl.tools.sanitize import sanitize, to_jsonable
from agentrl.tools.settings import ToolsConfig, resolve_policy
from agentrl.types import ToolCall


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_dynamic_timeout_hand_computed():
    # mean 2, population std sqrt(2/3) = 0.8165 -> 3 x 2.8165 = 8.4495
    assert dynamic_timeout([1.0, 2.0, 3.0], 3.0, 0.1, 100.0, 5.0) == pytest.approx(8.449490)
    assert dynamic_timeout([1.0, 2.0, 3.0], 3.0, 0.1, 5.0, 5.0) == 5.0  # ceiling
    assert dynamic_timeout([0.01, 0.01], 3.0, 1.0, 30.0, 5.0) == 1.0  # floor
    assert dynamic_timeout([0.5], 3.0, 1.0, 30.0, 7.0) == 7.0  # too few: initial
    assert dynamic_timeout([], 3.0, 1.0, 30.0, 70.0) == 30.0  # initial, clamped
    assert dynamic_timeout([math.inf, 1.0], 3.0, 1.0, 30.0, 5.0) == 30.0


def test_breaker_state_machine():
    clock = Clock()
    b = CircuitBreaker(failures=3, cooldown_s=10.0, clock=clock)
    for _ in range(2):
        assert b.allow()
        b.record(False)
    assert b.state == CLOSED
    b.record(True)  # success resets the streak
    for _ in range(3):
        assert b.allow()
        b.record(False)
    assert b.state == OPEN and not b.allow() and b.retry_in() == 10.0
    clock.now = 9.9
    assert not b.allow()
    clock.now = 10.0
    assert b.state == HALF_OPEN
    assert b.allow() and not b.allow()  # one trial call at a time
    b.record(False)  # failed trial: open again, a new cool-down
    assert b.state == OPEN and b.opened_count == 2
    clock.now = 20.0
    assert b.allow()
    b.record(True)
    assert b.state == CLOSED and b.allow() and b.allow()
    with pytest.raises(ValueError, match="failures must be >= 1"):
        CircuitBreaker(failures=0)


calls = {"flaky": 0}


@tool
def flaky(x: int) -> int:
    """Fails until told otherwise."""
    calls["flaky"] += 1
    if x < 0:
        raise RuntimeError("backend down")
    return x


def test_guard_opens_the_circuit_and_recovers_after_cooldown():
    clock = Clock()
    settings = ToolsConfig(breaker_failures=2, breaker_cooldown_s=5.0, breaker_counts=["exception"])
    guard = ToolGuard(ToolRegistry([flaky]), settings=settings, health=HealthBoard(clock=clock))
    calls["flaky"] = 0
    codes = [guard.call(ToolCall("flaky", {"x": -1})).error_code for _ in range(4)]
    assert codes == ["exception", "exception", "circuit_open", "circuit_open"]
    assert calls["flaky"] == 2  # an open circuit answers at once, without calling
    msg = json.loads(guard.call(ToolCall("flaky", {"x": 1})).content)["message"]
    assert msg == (
        "flaky is unavailable after repeated failures (circuit open); "
        "try again in 5 s or do without it."
    )
    bad = guard.call(ToolCall("flaky", {"x": "one"}))  # bad arguments never touch the breaker
    assert bad.error_code == "invalid_arguments"
    clock.now = 5.0
    assert guard.call(ToolCall("flaky", {"x": 7})).content == "7"  # the trial call closes it
    assert guard.call(ToolCall("flaky", {"x": 8})).ok
    rates = guard.rates()
    assert rates["tool/flaky/circuit_open_rate"] == 3 / 8
    assert rates["tool/flaky/exception_rate"] == 2 / 8


def test_exceptions_do_not_open_the_circuit_by_default():
    guard = ToolGuard(ToolRegistry([flaky]), settings=ToolsConfig(breaker_failures=1),
                      health=HealthBoard())  # fmt: skip
    codes = {guard.call(ToolCall("flaky", {"x": -1})).error_code for _ in range(3)}
    assert codes == {"exception"}


def test_policy_precedence_defaults_tool_config():
    @tool(policy={"mode": "worker", "timeout_floor_s": 2.0, "coerce_arguments": True})
    def t(a: int) -> int:
        """T."""
        return a

    settings = ToolsConfig(timeout_floor_s=0.5, per_tool={"t": {"timeout_floor_s": 3.0}})
    p = resolve_policy(settings, "t", t.policy)
    assert (p.mode, p.timeout_floor_s, p.coerce_arguments, p.timeout_ceiling_s) == (
        "worker", 3.0, True, 30.0,
    )  # fmt: skip
    assert p.timeout_initial_s == 30.0  # unset: the ceiling
    with pytest.raises(ValueError, match=r"tool 't': bad policy"):
        resolve_policy(settings, "t", {"mode": "thread"})
    with pytest.raises(ValueError, match=r"tool 'u': timeout_floor_s 40.0 > timeout_ceiling_s"):
        resolve_policy(settings, "u", {"timeout_floor_s": 40.0})
    with pytest.raises(ValueError, match="needs 'tool'"):
        ToolsConfig(fallback={"kind": "tool"})


@tool
def backup(x: int) -> dict:
    """Backup."""
    return {"from": "backup", "x": x}


@tool
def sandbox_down(x: int) -> int:
    """Harness fault."""
    raise HarnessFault("bwrap exploded")


def test_fallbacks_default_message_tool_and_never_for_harness_faults():
    registry = ToolRegistry([flaky, backup, sandbox_down])
    for fb, content, ok in [
        ({"kind": "default", "value": {"x": None}}, '{"x": null}', True),
        ({"kind": "message", "message": "Down; answer without it."},
         '{"error": "exception", "message": "Down; answer without it."}', False),
        ({"kind": "tool", "tool": "backup"}, '{"from": "backup", "x": -1}', True),
    ]:  # fmt: skip
        settings = ToolsConfig(per_tool={"flaky": {"fallback": fb}})
        guard = ToolGuard(registry, settings=settings, health=HealthBoard())
        r = guard.call(ToolCall("flaky", {"x": -1}))
        assert (r.content, r.ok, r.name) == (content, ok, "flaky")
        assert r.fallback == (fb["kind"] if fb["kind"] != "tool" else "tool:backup")
        assert guard.failures[("flaky", "exception")] == 1  # the failure is still counted
    settings = ToolsConfig(fallback={"kind": "default", "value": 0})
    guard = ToolGuard(registry, settings=settings, health=HealthBoard())
    fault = guard.call(ToolCall("sandbox_down", {"x": 1}))
    assert (fault.ok, fault.error_code, fault.fallback) == (False, "sandbox_error", None)


@tool
def typed(n: int, ratio: float, flag: bool, mode: str = "a") -> list:
    """Typed.

    Args:
        n: Count.
        ratio: Ratio.
        flag: Flag.
        mode: Mode.
    """
    return [n, ratio, flag, mode]


def test_coercion_off_by_default_on_when_configured_and_counted():
    args = {"n": "3", "ratio": "0.5", "flag": "true"}
    off = ToolGuard(ToolRegistry([typed]), health=HealthBoard(), settings=ToolsConfig())
    assert off.call(ToolCall("typed", args)).error_code == "invalid_arguments"
    on = ToolGuard(ToolRegistry([typed]), health=HealthBoard(),
                   settings=ToolsConfig(coerce_arguments=True))  # fmt: skip
    coerced = on.call(ToolCall("typed", args))
    assert coerced.content == '[3, 0.5, true, "a"]'
    assert sorted(coerced.coerced) == ["flag", "n", "ratio"]  # the result names them
    assert on.call(ToolCall("typed", {"n": 1, "ratio": 2, "flag": False})).coerced == ()
    assert on.call(ToolCall("typed", {"n": "3.5", "ratio": 1, "flag": True})).error_code == (
        "invalid_arguments"
    )  # "3.5" is not an integer: no unsafe coercion
    assert on.rates()["tool/typed/coerced_rate"] == 1 / 3
    assert on.health.rates()["tool/typed/coerced_rate"] == 1 / 3


def test_validation_messages_name_argument_expected_and_got():
    @tool
    def pick(unit: str, n: int = 1) -> str:
        """Pick."""
        return unit

    pick.parameters["properties"]["unit"]["enum"] = ["c", "f"]
    guard = ToolGuard(ToolRegistry([pick]), health=HealthBoard(), settings=ToolsConfig())

    def msg(args):
        return json.loads(guard.call(ToolCall("pick", args)).content)["message"]

    assert msg({"unit": "k"}) == "pick: argument 'unit' must be one of ['c', 'f'], got 'k'."
    assert msg({"unit": "c", "n": [1]}) == "pick: argument 'n' must be of type integer, got [1]."
    long = msg({"unit": "c", "n": "9" * 10_000})
    assert (
        long.startswith("pick: argument 'n' must be of type integer, got '999") and len(long) < 200
    )


def test_sanitizer_more_cases():
    class Unprintable:
        def __str__(self):
            raise RuntimeError("no")

    assert to_jsonable(np.float32(np.nan)) == "nan"
    assert to_jsonable(np.arange(3)) == [0, 1, 2]
    assert to_jsonable(np.array([1.5, np.inf])) == [1.5, "inf"]
    assert to_jsonable(Unprintable()) == "<unprintable Unprintable>"
    assert to_jsonable(list(range(20_000)))[-1] == "...[10000 more items]"
    text, cut = sanitize(["z" * 5000], max_chars=50)
    assert cut and text == '["' + "z" * 48 + "...[truncated 4954 chars]"
