"""The meeting audit (``agentrl.envs.tasks.meeting_audit``): what an episode noted, asked, tried
and drafted, read back from a record shaped like an evaluation's, checked on probing reference
episodes and on episodes edited to drop the notes or to ask the calendars in the wrong zone."""

from __future__ import annotations

import pytest

from agentrl import envs
from agentrl.envs.tasks.meeting import MeetingFamily
from agentrl.envs.tasks.meeting_audit import episode_facts, summarize

FAMILY = MeetingFamily(probe_slots=True)


def play(level: int, seed: int, edit=lambda action, env: action, probe: bool = True) -> dict:
    """A meeting episode, each reference action passed through ``edit``; the record holds what
    an evaluation record holds for the audit."""
    env = envs.make("meeting", probe_slots=probe, max_turns=40)  # room for every try
    _, reset = env.reset(seed=seed, options={"level": level})
    for _ in range(env.max_turns):
        *_, done, truncated, info = env.step(edit(env.reference_action(), env))
        if done or truncated:
            break
    return {"task_id": reset["task_id"], "info": {"seed": seed}, "level": level,
            "messages": env.messages, "tool_calls": env.call_log, "success": info["success"],
            "termination": "success" if info["success"] else "failure"}  # fmt: skip


@pytest.mark.parametrize("level", [1, 2, 3])
def test_probing_reference_episodes_note_ask_try_and_stop_right(level):
    facts = episode_facts(play(level, seed=11), FAMILY)
    assert facts["success"] and facts["drafted"]
    assert not facts["ran_on_first_turn"] and not facts["repeated_turn"]
    assert facts["notes"] == facts["call_turns"] > 0
    assert facts["busy_in_organizer_zone"] and facts["tries_in_probe_order"]
    assert facts["tries"] == facts["tries_in_organizer_zone"] >= 1
    assert facts["found_free"] and facts["stopped_at_free"]
    assert set(facts["after_not_free"]) <= {"find_conflicts"}
    assert sum(facts["after_not_free"].values()) == facts["tries"] - 1


def _no_notes(action: str, env) -> str:
    """The calls without the note before them."""
    head, sep, tail = action.partition("<tool_call>")
    return sep + tail if sep else action


def _wrong_zone_once(action: str, env) -> str:
    """The first calendars asked in a zone that is not the organizer's (the reference then asks
    again in the right one, since those calls did not match its own)."""
    world = env.instance.data["world"]
    org_tz = world["people"][world["organizer"]]["timezone"]
    other = "Pacific/Auckland" if org_tz != "Pacific/Auckland" else "Europe/Paris"
    if '"get_busy"' in action and not any(c["name"] == "get_busy" for c in env.call_log):
        return action.replace(f'"timezone": "{org_tz}"', f'"timezone": "{other}"')
    return action


def test_dropped_notes_and_a_wrong_zone_are_counted():
    plain = episode_facts(play(1, seed=11, edit=_no_notes), FAMILY)
    assert plain["notes"] == 0 < plain["call_turns"] and plain["success"]
    wrong = episode_facts(play(1, seed=11, edit=_wrong_zone_once), FAMILY)
    assert not wrong["busy_in_organizer_zone"] and wrong["success"]
    assert wrong["tries"] == wrong["tries_in_organizer_zone"] >= 1
    summary = summarize([plain, wrong, episode_facts(play(2, seed=3), FAMILY)])
    assert summary["episodes"] == 3 and summary["with_notes"] == 2
    assert summary["notes_on_every_call_turn"] == 2 and summary["busy_in_organizer_zone"] == 2
    assert summary["success"] == 3 and summary["stopped_at_free"] == 3


def test_default_mode_records_rebuild_the_same_world_and_a_foreign_record_is_refused():
    """The worlds are the same with and without probing, so one family reads both; a record
    whose task id does not match its rebuilt instance is refused, not misread."""
    record = play(2, seed=8, probe=False)
    facts = episode_facts(record, FAMILY)
    assert facts["success"] and facts["busy_in_organizer_zone"] and facts["notes"] == 0
    record["info"]["seed"] = 9
    with pytest.raises(ValueError, match="rebuilt"):
        episode_facts(record, FAMILY)


def test_a_run_on_first_turn_and_a_repeated_turn_are_counted():
    """No whole assistant turn (the first ran past its token limit), and a turn said again word
    for word after its results came back: the two ways the probing warm start spent its
    episodes' tokens."""
    record = play(1, seed=11)
    first_user = next(i for i, m in enumerate(record["messages"]) if m["role"] == "user")
    ran_on = {**record, "messages": record["messages"][: first_user + 1], "tool_calls": []}
    facts = episode_facts(ran_on, FAMILY)
    assert facts["ran_on_first_turn"] and facts["turns"] == 0 and not facts["repeated_turn"]
    msgs = record["messages"]
    turn = next(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    results = [m for m in msgs[turn + 1 :] if m["role"] == "tool"][:1]
    looped = {**record, "messages": msgs[: turn + 2] + [msgs[turn], *results]}
    facts = episode_facts(looped, FAMILY)
    assert facts["repeated_turn"] and facts["turns"] == 2 and not facts["ran_on_first_turn"]
    assert summarize([facts, episode_facts(ran_on, FAMILY)])["repeated_turn"] == 1
