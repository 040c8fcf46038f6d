"""The ledger audit (``agentrl.envs.tasks.ledger_audit``): what an episode chose, noted and
posted, read back from a record shaped like an evaluation's, checked on reference episodes and
on episodes edited to post to the wrong account or to write a false note."""

from __future__ import annotations

import pytest

from agentrl import envs
from agentrl.envs.tasks.ledger import LedgerFamily
from agentrl.envs.tasks.ledger_audit import episode_facts, note_accounts, summarize


def play(level: int, seed: int, edit=lambda action, env: action) -> dict:
    """A ledger episode with running notes, each reference action passed through ``edit``; the
    record holds what an evaluation record holds for the audit."""
    env = envs.make("ledger", running_top=True)
    env.reset(seed=seed, options={"level": level})
    for _ in range(env.max_turns):
        *_, done, truncated, info = env.step(edit(env.reference_action(), env))
        if done or truncated:
            break
    return {"info": {"seed": seed}, "level": level, "messages": env.messages,
            "tool_calls": env.call_log, "success": info["success"],
            "termination": "success" if info["success"] else "failure"}  # fmt: skip


def test_note_accounts():
    assert note_accounts("Largest so far: A262 8840, A502 -7788.\n") == ["A262", "A502"]
    assert note_accounts("no note here") is None


@pytest.mark.parametrize("level", [1, 2, 3])
def test_reference_episodes_choose_note_and_post_right(level):
    facts = episode_facts(play(level, seed=5), LedgerFamily(running_top=True))
    assert facts["success"] and facts["read_all"] and facts["posted_right"]
    assert facts["notes"] == facts["notes_true"] > 0
    assert facts["post_followed_note"] and facts["note_at_post_right"]


def _wrong_account(action: str, env) -> str:
    """Post to an account that is not a target (the note stays true)."""
    if '"record"' not in action:
        return action
    other = next(a["id"] for a in env.instance.data["accounts"]
                 if a["id"] not in env.instance.data["targets"])  # fmt: skip
    return action.replace(env.instance.data["targets"][0], other).replace(
        "Largest so far: " + other, "Largest so far: " + env.instance.data["targets"][0]
    )


def _false_notes(action: str, env) -> str:
    """Every note names an account that is not the largest so far (the calls stay right)."""
    head, sep, tail = action.partition("<tool_call>")
    if "Largest so far" not in head:
        return action
    wrong = next(a["id"] for a in env.instance.data["accounts"]
                 if a["id"] not in head)  # fmt: skip
    return f"Largest so far: {wrong} 1.\n" + sep + tail


def test_a_wrong_posting_and_false_notes_are_counted():
    family = LedgerFamily(running_top=True)
    wrong = episode_facts(play(1, seed=5, edit=_wrong_account), family)
    assert not wrong["success"] and not wrong["posted_right"]
    assert wrong["posted"] and wrong["notes"] == wrong["notes_true"] > 0
    assert not wrong["post_followed_note"] and wrong["note_at_post_right"]
    false = episode_facts(play(1, seed=5, edit=_false_notes), family)
    assert false["posted_right"] and false["notes"] > 0 and false["notes_true"] == 0
    assert not false["note_at_post_right"] and not false["post_followed_note"]
    right = episode_facts(play(1, seed=5), family)
    summary = summarize([right, wrong, false])
    assert summary["episodes"] == 3 and summary["success"] == 2 and summary["posted_right"] == 2
    true, all_notes = right["notes"] + wrong["notes"], summary["notes"]
    assert all_notes == true + false["notes"]
    assert summary["notes_true_share"] == pytest.approx(true / all_notes, abs=1e-3)
    assert false["notes"] > 0
    assert summary["note_at_post_right"] == 2
    assert summary["termination"] == {"success": 2, "failure": 1}
