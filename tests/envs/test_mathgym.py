"""The math family: reasoning-gym problems, the calculator, reasoning-gym's scorer."""

from __future__ import annotations

import random

import pytest
from envhelpers import call, play

pytest.importorskip("reasoning_gym")

import agentrl.envs as envs  # noqa: E402
from agentrl.envs import check_env  # noqa: E402
from agentrl.envs.tasks.mathgym import MathFamily, extract_answer, safe_eval  # noqa: E402

FAMILY = MathFamily()


def test_safe_eval():
    assert (
        safe_eval("(12 + 7) * 3") == 57 and safe_eval("7 / 2") == 3.5 and safe_eval("2^10") == 1024
    )
    for bad in ("__import__('os')", "1/0", "2**1000", "x + 1", "a" * 400):
        with pytest.raises(ValueError):
            safe_eval(bad)


def test_extract_answer():
    assert extract_answer("The result is 1,234.") == "1234"
    assert extract_answer("<answer>-7</answer> (checked 3 times)") == "-7"


@pytest.mark.parametrize("level", [1, 2, 3])
def test_verifier_uses_reasoning_gym_scores(level):
    inst = FAMILY.sample(random.Random(level), level)
    answer = inst.data["entry"]["answer"]
    env = envs.make("math")
    good = play(env, [call("calculate", expression="1+1"), f"The answer is {answer}."],
                instance=inst)  # fmt: skip
    assert good["termination"] == "success"
    assert good["reward"].layers["progress"] == 0.0  # the calculator never gave the answer
    wrong = str(int(float(answer)) + 1)
    assert play(env, [wrong], instance=inst)["termination"] == "failure"
    assert play(env, [f"{wrong} or maybe {answer}? no: {wrong}"], instance=inst)[
        "termination"] == "failure"  # fmt: skip


def test_levels_draw_arithmetic_then_algebra():
    kinds = {lv: {FAMILY.sample(random.Random(s), lv).data["dataset"] for s in range(12)}
             for lv in (1, 2, 3)}  # fmt: skip
    assert kinds == {1: {"basic_arithmetic"}, 2: {"products", "chain_sum"}, 3: {"simple_equations"}}


def test_reference_solves_all_levels():
    assert check_env(envs.make("math"), seeds=range(10))["success_rate"] == 1.0
