"""The math family: reasoning-gym problems, the calculator, reasoning-gym's scorer."""

from __future__ import annotations

import random

import pytest
from envhelpers import call, play

pytest.importorskip("reasoning_gym")

import agentrl.envs as envs  # noqa: E402
from agentrl.envs import check_env  # noqa: E402
from agentrl.envs.tasks.mathgym import (  # noqa: E402
    MathFamily,
    extract_answer,
    linear_solution_expression,
    safe_eval,
)

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


def test_equation_expressions_use_the_questions_numbers():
    cases = {
        "95 - 161*h = -25021": "(-25021 - 95) / (-161)",
        "53*s - 124 = 6554": "(6554 + 124) / 53",
        "3173*k = 79325": "79325 / 3173",
    }
    for equation, want in cases.items():
        got = linear_solution_expression(equation, equation[equation.index("*") + 1])
        assert got == want
    assert safe_eval(cases["95 - 161*h = -25021"]) == 156
    with pytest.raises(ValueError, match="no unique solution"):
        linear_solution_expression("0 = 0", "i")  # reasoning-gym does write this


def test_level3_expressions_evaluate_to_the_answer():
    rng = random.Random(7)
    for _ in range(40):
        inst = FAMILY.sample(rng, 3)
        value = safe_eval(inst.expected_calls[0].arguments["expression"])
        assert value == float(inst.data["entry"]["answer"])
