"""Arithmetic with a code interpreter (ToRL): ``make("arith_code")``.

The one tool is ``run_python(code)``, which runs model-written Python in the sandbox
(``agentrl.sandbox``). Numbers are too large to do in one's head, so the policy must learn to
write a program, read its output and answer.

Levels: 1 = one operation on 3-4 digit numbers (``4821 * 377``); 2 = three operations with
parentheses (``(512 + 86) * 73 - 4410``); 3 = a sum of squares over a range or a modular power
(``sum(i * i for i in range(17, 95))``, ``pow(7, 123, 1009)``).

Verifier (``check_answer``): the last integer in the answer (thousands separators allowed) is
the value; answers over 300 characters fail. The reference solver prints the expression with
``run_python`` and answers "The answer is N.".
"""

from __future__ import annotations

import random
import re
from typing import Any

from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.sandbox import SandboxLimits, SandboxUnavailable, bwrap_status, python_tool
from agentrl.tools.registry import Tool
from agentrl.types import ToolCall

SYSTEM_PROMPT = (
    "You solve arithmetic with the run_python tool: print the result, then reply with the number."
)
MAX_ANSWER_CHARS = 300
_INT_RE = re.compile(r"(?<![\w.])-?\d+(?![\d.]*\d)")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def last_integer(text: str) -> int | None:
    """The last integer written in ``text`` (``1,234`` reads as 1234), or None."""
    found = _INT_RE.findall(_THOUSANDS_RE.sub("", text.replace("\u2212", "-")))
    return int(found[-1]) if found else None


def _expression(rng: random.Random, level: int) -> tuple[str, str]:
    """(expression in Python, the question asked)."""
    if level == 1:
        a, b = rng.randint(100, 9999), rng.randint(100, 9999)
        op = rng.choice(("+", "-", "*"))
        expr = f"{a} {op} {b}"
        return expr, f"What is {expr}?"
    if level == 2:
        a, b, c, d = (rng.randint(10, 999) for _ in range(4))
        op1, op2 = rng.choice(("+", "-")), rng.choice(("+", "-"))
        expr = f"({a} {op1} {b}) * {c} {op2} {d}"
        return expr, f"Compute {expr}."
    if rng.random() < 0.5:
        lo = rng.randint(1, 60)
        hi = lo + rng.randint(20, 120)
        expr = f"sum(i * i for i in range({lo}, {hi + 1}))"
        return expr, f"What is the sum of the squares of the integers from {lo} to {hi}?"
    base, exp, mod = rng.randint(2, 99), rng.randint(50, 500), rng.randint(101, 9973)
    expr = f"pow({base}, {exp}, {mod})"
    return expr, f"What is {base} to the power {exp}, modulo {mod}?"


class ArithFamily(TaskFamily):
    """Arithmetic questions answered by running Python in the sandbox.

    ``timeout_s`` / ``memory_mb``: sandbox limits; ``sandbox_mode``: ``bwrap`` (refuses if
    bubblewrap cannot run, with the install command) or ``unsafe``; ``tool_mode``: ``worker``
    (the tool runs in a worker process) or ``inprocess``.
    """

    name = "arith_code"
    levels = (1, 2, 3)
    system_prompt = SYSTEM_PROMPT

    def __init__(
        self,
        timeout_s: float = 5.0,
        memory_mb: int = 256,
        sandbox_mode: str = "bwrap",
        tool_mode: str = "worker",
    ) -> None:
        if sandbox_mode == "bwrap":
            ok, reason = bwrap_status()
            if not ok:
                raise SandboxUnavailable(f"arith_code needs the sandbox: {reason}")
        limits = SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb, max_output_chars=2_000)
        self._tool = python_tool(limits, mode=sandbox_mode, policy={"mode": tool_mode})

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        """A question at ``level`` and its value, from ``rng`` only."""
        expr, question = _expression(rng, level)
        value = eval(expr, {"__builtins__": {"sum": sum, "range": range, "pow": pow}})  # noqa: S307 - our own expression
        return TaskInstance(
            task_id=f"arith-L{level}-{rng.getrandbits(32):08x}",
            level=level,
            prompt=question,
            data={"expr": expr, "answer": int(value)},
            expected_calls=[ToolCall("run_python", {"code": f"print({expr})"})],
        )

    def tools(self, instance: TaskInstance) -> list[Tool]:
        """The one ``run_python`` tool (the same object every episode)."""
        return [self._tool]

    def check_answer(self, instance: TaskInstance, answer: str) -> bool:
        """The last integer of the answer is the value (see the module docstring)."""
        if not answer or len(answer) > MAX_ANSWER_CHARS:
            return False
        return last_integer(answer) == instance.data["answer"]

    def reference_answer(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """ "The answer is N." with N read from the program's stdout."""
        out = results[0]
        stdout = out.get("stdout", "") if isinstance(out, dict) else str(out)
        return f"The answer is {stdout.strip()}."
