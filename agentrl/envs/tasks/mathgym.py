"""Math with a calculator (ToRL-style, ``make("math")``): problems from ``reasoning-gym``.

Problems come from reasoning-gym's procedural generators (offline, seeded): level 1
``basic_arithmetic`` (2-3 small terms), level 2 ``products`` / ``chain_sum`` (large numbers),
level 3 ``simple_equations`` (solve a linear equation). One tool: ``calculate(expression)``,
a safe arithmetic evaluator (the sandboxed code interpreter lives in ``agentrl.sandbox``).

Verifier: the final answer (the text inside ``<answer>...</answer>`` if present, else the
last number in the reply) is scored by reasoning-gym's own ``score_answer``; success = 1.0.
The reference solver computes the problem's expression (for equations: ``-b / a`` of the
linear form, found with sympy) with the calculator and answers with the result.
"""

from __future__ import annotations

import ast
import operator
import random
import re
from typing import Any

from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.envs.tasks.shaped import duplicate_results
from agentrl.tools.registry import Tool, tool
from agentrl.types import ToolCall

try:
    import reasoning_gym
except ImportError:  # pragma: no cover - depends on the optional extra
    reasoning_gym = None

#: level -> [(reasoning-gym dataset, config)], one drawn per instance.
GENERATORS: dict[int, list[tuple[str, dict[str, Any]]]] = {
    1: [("basic_arithmetic", {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2,
                              "operators": ("+", "-", "*"), "allow_negation": False})],
    2: [("products", {"min_digits": 3, "max_digits": 4}),
        ("chain_sum", {"min_terms": 4, "max_terms": 5, "min_digits": 3, "max_digits": 3})],
    3: [("simple_equations", {"min_terms": 2, "max_terms": 3, "max_value": 200})],
}  # fmt: skip
SYSTEM_PROMPT = "Solve the problem. Use the calculator, then reply with the final number only."
_OPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos,
}  # fmt: skip
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.S)
_NUM_RE = re.compile(r"-?\d+(?:\.\d+)?")


def require_reasoning_gym() -> Any:
    """The module, or an ImportError naming the package to install."""
    if reasoning_gym is None:
        raise ImportError("the math task needs reasoning-gym: pip install 'agentrl[tasks]'")
    return reasoning_gym


def safe_eval(expression: str) -> float | int:
    """Evaluate + - * / // % ** and parentheses on numbers; anything else is a ValueError."""
    text = str(expression).replace("^", "**").replace("×", "*").replace("÷", "/")
    if len(text) > 300:
        raise ValueError("Expression too long (300 characters at most).")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"Cannot parse {expression!r} as arithmetic.") from exc

    def ev(node: ast.AST) -> float | int:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError("Exponent too large.")
            return _OPS[type(node.op)](left, right)
        raise ValueError(f"Unsupported syntax in {expression!r}: only numbers and + - * / ( ).")

    try:
        value = ev(tree.body)
    except ZeroDivisionError as exc:
        raise ValueError("Division by zero.") from exc
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return round(value, 10) if isinstance(value, float) else value


def linear_solution_expression(equation: str, variable: str) -> str:
    """The solution of a linear equation as arithmetic on the numbers the question shows.

    ``a*x + c = r`` gives ``(r - c) / a`` (``95 - 161*h = -25021`` gives
    ``(-25021 - 95) / (-161)``): moving the constant and dividing by the coefficient, so a
    demonstration shows a step a model can copy from the question rather than the simplified
    ``-b / a`` it would have to work out in its head. An equation with the variable on both
    sides falls back to ``-b / a`` of ``lhs - rhs``. ``ValueError`` when ``x`` has no unique
    solution (a zero coefficient: reasoning-gym sometimes writes ``0 = 0``).
    """
    import sympy

    x = sympy.Symbol(variable)
    lhs, rhs = (sympy.expand(sympy.sympify(side, locals={variable: x}))
                for side in equation.split("="))  # fmt: skip
    if rhs.has(x):
        lhs, rhs = sympy.expand(lhs - rhs), sympy.Integer(0)
    a, c = lhs.coeff(x, 1), lhs.subs(x, 0)
    if a == 0 or lhs.has(x**2):
        raise ValueError(f"no unique solution for {variable} in {equation!r}")
    top = f"{rhs}" if c == 0 else f"{rhs} - {c}" if c > 0 else f"{rhs} + {-c}"
    bottom = f"({a})" if a < 0 else f"{a}"
    if c == 0:
        return top if a == 1 else f"{top} / {bottom}"
    return f"({top}) / {bottom}"


def extract_answer(text: str) -> str:
    """The ``<answer>`` content if present, else the last number, else the stripped text."""
    tagged = _ANSWER_RE.findall(text)
    if tagged:
        return tagged[-1].strip()
    numbers = _NUM_RE.findall(text.replace(",", ""))
    return numbers[-1] if numbers else text.strip()


class MathFamily(TaskFamily):
    """reasoning-gym arithmetic and algebra answered with a calculator tool."""

    name = "math"
    levels = (1, 2, 3)
    system_prompt = SYSTEM_PROMPT

    def __init__(self) -> None:
        require_reasoning_gym()

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        """One reasoning-gym entry at ``level`` (its seed drawn from ``rng``); an equation
        without a unique solution is drawn again."""
        name, cfg = rng.choice(GENERATORS[level])
        while True:
            seed = rng.getrandbits(31)
            entry = reasoning_gym.create_dataset(name, size=1, seed=seed, **cfg)[0]
            meta = entry["metadata"]
            if name != "simple_equations":
                expression = meta["expression"].rstrip("= ").strip()
                break
            try:
                expression = linear_solution_expression(meta["equation"], meta["variable"])
                break
            except ValueError:
                continue
        data = {"dataset": name, "entry": entry}
        calls = [ToolCall("calculate", {"expression": expression})]
        return TaskInstance(
            f"math-L{level}-{name}-{seed:08x}", level, entry["question"], data, calls
        )

    def tools(self, instance: TaskInstance) -> list[Tool]:
        """``calculate(expression)``."""

        @tool
        def calculate(expression: str) -> dict:
            """Evaluate an arithmetic expression (+ - * / // % ** and parentheses).

            Args:
                expression: e.g. "(12 + 7) * 3".
            """
            return {"expression": expression, "result": safe_eval(expression)}

        return [calculate]

    def check_answer(self, instance: TaskInstance, answer: str) -> bool:
        """reasoning-gym's scorer on the extracted answer must give 1.0."""
        if not answer.strip() or len(answer) > 500:
            return False
        score_fn = reasoning_gym.get_score_answer_fn(instance.data["dataset"])
        return float(score_fn(extract_answer(answer), instance.data["entry"])) >= 1.0

    def reference_answer(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """The calculator's result."""
        return str(results[0]["result"])

    def process_layers(self, instance: TaskInstance, call_log: list[dict]) -> dict[str, float]:
        """``progress``: the calculator produced the right value; ``reask``: duplicates."""
        want = str(instance.data["entry"]["answer"])
        right = any(e["ok"] and f'"result": {want}' in e["content"] for e in call_log)
        return {"progress": float(right), "reask": float(duplicate_results(call_log))}
