"""The general-capability check: plain questions with checkable answers, no tools.

RL on tool use can cost a model what it knew (seed 003 section 2.2: evaluate general tasks to
catch capability loss). ``general_check`` asks a fixed set of 48 questions, greedily, in the
model's own chat format with no tools: 32 arithmetic questions (sums, differences, products of
small numbers, drawn once from a fixed seed) and 16 facts. An arithmetic answer is right when
the first integer in the reply that is not an operand of the question (models echo "56 + 26 =
82") is the result; a fact is right when the reply names one of its
accepted answers as a word. The accuracy before and after RL, and its drop, are part of a
training run's summary (``train.general_check``) and of ``agentrl eval --general``.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from agentrl.chat.render import encode_prompt

SYSTEM = "You are a helpful assistant. Answer the question briefly."
MAX_NEW_TOKENS = 24

FACTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("What is the capital of France?", ("paris",)),
    ("What is the capital of Japan?", ("tokyo",)),
    ("What is the capital of Italy?", ("rome",)),
    ("What is the capital of Germany?", ("berlin",)),
    ("What is the capital of Spain?", ("madrid",)),
    ("What is the capital of Egypt?", ("cairo",)),
    ("How many days are in a week?", ("7", "seven")),
    ("How many legs does a spider have?", ("8", "eight")),
    ("What is the largest planet in the solar system?", ("jupiter",)),
    ("Which planet is known as the Red Planet?", ("mars",)),
    ("What is the chemical symbol for gold?", ("au",)),
    ("What gas do plants absorb from the air for photosynthesis?", ("carbon dioxide", "co2")),
    ("What is the freezing point of water in degrees Celsius?", ("0", "zero")),
    ("Who wrote the play Romeo and Juliet?", ("shakespeare",)),
    ("What is the opposite of hot?", ("cold",)),
    ("What color do you get by mixing blue and yellow?", ("green",)),
)


@dataclass(frozen=True)
class Question:
    kind: str  # "arithmetic" or "fact"
    text: str
    answers: tuple[str, ...]  # accepted answers (arithmetic: the one integer)


def questions(seed: int = 0) -> list[Question]:
    """The fixed question set: 32 arithmetic questions (from ``seed``) then the 16 facts."""
    rng = random.Random(seed)
    out = []
    for i in range(32):
        op = ("+", "-", "*")[i % 3]
        a, b = rng.randint(2, 60), rng.randint(2, 40 if op != "*" else 12)
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        out.append(Question("arithmetic", f"What is {a} {op} {b}? Reply with the number.",
                            (str(value),)))  # fmt: skip
    out += [Question("fact", q, a) for q, a in FACTS]
    return out


def is_correct(question: Question, reply: str) -> bool:
    """Whether ``reply`` answers ``question`` (see the module docstring)."""
    text = reply.lower()
    if question.kind == "arithmetic":  # the first integer that is not an operand echoed
        operands = set(re.findall(r"\d+", question.text))
        found = [n for n in re.findall(r"-?\d+", text.replace(",", "")) if n not in operands]
        return bool(found) and found[0] == question.answers[0]
    return any(re.search(rf"(?<![a-z0-9]){re.escape(a)}(?![a-z0-9])", text)
               for a in question.answers)  # fmt: skip


def general_check(generator: Any, tokenizer: Any, seed: int = 0) -> dict[str, Any]:
    """Greedy answers of ``generator`` to the question set: accuracy overall and per kind,
    and each question's reply."""
    qs = questions(seed)
    prompts = [
        encode_prompt(
            tokenizer, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q.text}]
        )  # fmt: skip
        for q in qs
    ]
    samples = generator.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, greedy=True)
    replies = [tokenizer.decode(s.ids, skip_special_tokens=True) for s in samples]
    right = [is_correct(q, r) for q, r in zip(qs, replies, strict=True)]
    by_kind: dict[str, float] = {}
    for kind in ("arithmetic", "fact"):
        marks = [ok for q, ok in zip(qs, right, strict=True) if q.kind == kind]
        by_kind[kind] = sum(marks) / len(marks)
    return {
        "accuracy": sum(right) / len(right),
        "by_kind": by_kind,
        "questions": len(qs),
        "replies": [
            {"question": q.text, "reply": r, "correct": ok}
            for q, r, ok in zip(qs, replies, right, strict=True)
        ],  # fmt: skip
    }
