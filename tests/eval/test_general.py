"""The general-capability check: a fixed question set, strict scoring, and its figures in a
training run's summary."""

from __future__ import annotations

import json

from runhelpers import tiny_run_overrides

from agentrl.config import build_config
from agentrl.eval.general import Question, general_check, is_correct, questions
from agentrl.policy.generate import Sample
from agentrl.train import train


def test_question_set_is_fixed_and_its_arithmetic_is_right():
    qs = questions()
    assert len(qs) == 48 and qs == questions()
    assert [q.kind for q in qs].count("arithmetic") == 32
    for q in qs[:32]:
        expr = q.text.removeprefix("What is ").split("?")[0]
        assert str(eval(expr)) == q.answers[0]  # noqa: S307 - our own "a op b" strings


def test_scoring_reads_the_first_integer_and_whole_words():
    sum_q = Question("arithmetic", "What is 7 - 9?", ("-2",))
    assert is_correct(sum_q, "The answer is -2.")
    assert not is_correct(sum_q, "2")  # the sign matters
    assert is_correct(sum_q, "7 - 9 = -2")  # an echoed expression is skipped
    assert not is_correct(sum_q, "7 - 9 = 3, or -2")  # the first other integer is the answer
    assert is_correct(Question("arithmetic", "What is 40 * 30?", ("1200",)), "1,200")
    gold = Question("fact", "What is the chemical symbol for gold?", ("au",))
    assert is_correct(gold, "Au")
    assert not is_correct(gold, "It is August.")  # not inside another word
    assert not is_correct(Question("fact", "?", ("paris",)), "a parish")


class _Answering:
    """A generator that answers every question right (or wrong)."""

    def __init__(self, tok, right: bool):
        self.tok, self.right, self.prompts = tok, right, []

    def generate(self, prompts, max_new_tokens, greedy):
        assert greedy
        self.prompts = prompts
        out = []
        for q in questions():
            text = q.answers[0] if self.right else "I do not know"
            out.append(Sample(self.tok.encode(text, add_special_tokens=False), [0.0], True))
        return out


def test_general_check_scores_replies_through_the_chat_template(tiny_policy):
    _, tok = tiny_policy
    right = general_check(_Answering(tok, True), tok)
    assert right["accuracy"] == 1.0 and right["by_kind"] == {"arithmetic": 1.0, "fact": 1.0}
    gen = _Answering(tok, False)
    wrong = general_check(gen, tok)
    assert wrong["accuracy"] == 0.0 and len(wrong["replies"]) == 48
    rendered = tok.decode(gen.prompts[40])
    assert questions()[40].text in rendered and "<tools>" not in rendered  # no tools offered


def test_a_run_reports_general_capability_before_and_after(tiny_dir, tmp_path):
    run = tmp_path / "run"
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, run), "train.steps=1",
                            "train.eval_episodes=2", "train.save_model=false"])  # fmt: skip
    summary = train(cfg, progress=False)
    before, after = summary["general_before"], summary["general_after"]
    assert 0.0 <= before <= 1.0 and 0.0 <= after <= 1.0
    assert summary["general_drop"] == round(before - after, 6)
    lines = (run / "general_before.jsonl").read_text().splitlines()
    assert len(lines) == 48 and {"question", "reply", "correct"} <= set(json.loads(lines[0]))
    curve = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    assert curve[0]["general_accuracy"] == before and curve[-1]["general_accuracy"] == after
