"""The meeting family: zoneinfo/DST conversions, conflict detection, the email verifier."""

from __future__ import annotations

import random
import re

import pytest
from envhelpers import call, play

import agentrl.envs as envs
from agentrl.envs import TaskInstance, check_env
from agentrl.envs.tasks.meeting import MeetingFamily, email_ok, email_score

DAY = "2025-03-12"  # US clocks moved on 9 March, Europe's on 30 March: 5 h apart, not 6


def world() -> dict:
    people = {
        "Alice": {
            "timezone": "Europe/Paris",
            "work_start": "09:00",
            "work_end": "17:00",
            "busy": [],
        },
        "Bob": {
            "timezone": "America/New_York",
            "work_start": "09:00",
            "work_end": "17:00",
            "busy": [("2025-03-12T14:00:00+00:00", "2025-03-12T15:00:00+00:00")],
        },
    }  # fmt: skip  (Bob is busy 10:00-11:00 New York time)
    return {"people": people, "organizer": "Alice", "date": DAY, "minutes": 60}


def instance() -> TaskInstance:
    data = {"world": world(), "slot": "2025-03-12T16:00:00+01:00", "stages": [0]}
    return TaskInstance("m", 1, "Meet Bob.", data, [])


def email(body: str, to=("Bob",)) -> str:
    return call("draft_email", to=list(to), subject="Meeting", body=body)


GOOD = [
    "Alice: 16:00 (Paris)\nBob: 11:00 (New York)",  # 16:00 CET = 11:00 EDT during the gap week
    "Hi Bob,\nfor Alice that is 2025-03-12 16:00-17:00\nBob: 11:00 to 12:00 EDT",
]
BAD = [
    "Alice: 16:00\nBob: 10:00",  # the standard-time offset (6 h): wrong during DST mismatch
    "Alice: 15:00\nBob: 10:00",  # Bob is busy then
    "Alice: 17:00\nBob: 12:00",  # ends after Alice's working hours
    "Alice: 08:30\nBob: 03:30",  # before anyone's working hours
    "Alice: 16:00 (Paris)",  # Bob's local time missing
    "Alice: 16:00 or 10:00 or 12:00\nBob: 11:00",  # listing guesses
]


@pytest.mark.parametrize("body", GOOD)
def test_good_email_trajectory_succeeds(body):
    env = envs.make("meeting")
    info = play(env, [call("get_timezone", person="Bob"), email(body), "Drafted."],
                instance=instance())  # fmt: skip
    assert info["termination"] == "success", body
    assert info["reward"].layers["completion"] == 1.0


@pytest.mark.parametrize("body", BAD)
def test_bad_email_trajectory_fails(body):
    env = envs.make("meeting")
    info = play(env, [email(body), "Drafted."], instance=instance())
    assert info["termination"] == "failure", body


def test_no_email_or_wrong_recipients_fails():
    env = envs.make("meeting")
    assert play(env, ["Let's meet at 16:00."], instance=instance())["termination"] == "failure"
    info = play(env, [email(GOOD[0], to=["Carol"]), "Done."], instance=instance())
    assert info["termination"] == "failure"
    assert email_ok(world(), {"to": ["bob"], "body": GOOD[0]})


def test_tools_convert_with_dst_and_detect_conflicts():
    env = envs.make("meeting")
    env.reset(seed=0, options={"instance": instance()})
    conv = call("convert_time", date=DAY, time="16:00", from_timezone="Europe/Paris",
                to_timezone="America/New_York")  # fmt: skip
    busy = call("find_conflicts", people=["Alice", "Bob"], date=DAY, start="15:00",
                duration_minutes=60, timezone="Europe/Paris")  # fmt: skip
    obs, *_ = env.step(conv + "\n" + busy + "\n" + call("convert_time", date="2025-04-02",
        time="16:00", from_timezone="Europe/Paris", to_timezone="America/New_York"))  # fmt: skip
    assert '"time": "11:00"' in obs[0]["content"] and '"utc_offset": "-4h"' in obs[0]["content"]
    assert '"free": false' in obs[1]["content"] and "busy" in obs[1]["content"]
    assert '"time": "10:00"' in obs[2]["content"]  # both on summer time again: 6 h apart
    obs, *_ = env.step(call("convert_time", date=DAY, time="9:00", from_timezone="Mars/Base",
                            to_timezone="UTC"))  # fmt: skip
    assert "Unknown time zone" in obs[0]["content"]


def test_process_reward_counts_milestones():
    env = envs.make("meeting")
    info = play(env, [call("get_timezone", person="Alice") + call("get_timezone", person="Bob"),
                      "I could not finish."], instance=instance())  # fmt: skip
    assert info["termination"] == "failure"
    assert info["reward"].layers["progress"] == pytest.approx(0.25)
    assert info["reward"].weights["progress"] > 0 > info["reward"].weights["reask"]


@pytest.mark.parametrize(
    ("body", "to", "want"),
    [
        (GOOD[0], ("Bob",), 1.0),
        ("Alice: 16:00\nBob: 10:00", ("Bob",), 3 / 4),  # slot fine, Bob's time 6 h off
        ("Alice: 15:00\nBob: 10:00", ("Bob",), 3 / 4),  # Bob busy; both local times right
        ("Alice: 16:00 (Paris)", ("Bob",), 3 / 4),  # Bob's line missing
        ("Alice: 16:00 or 10:00 or 12:00\nBob: 11:00", ("Bob",), 3 / 4),  # a list of guesses
        (GOOD[0], ("Carol",), 3 / 4),  # Bob not invited
        ("Let us meet at four.", ("Bob",), 1 / 4),  # no start named: only the invitation
        ("Let us meet at four.", (), 0.0),
    ],
)
def test_email_score_grades_each_check_and_is_one_exactly_when_the_email_passes(body, to, want):
    draft = {"to": list(to), "body": body}
    assert email_score(world(), draft) == pytest.approx(want)
    assert email_ok(world(), draft) == (want == 1.0)


def test_progress_grades_the_email_by_its_checks():
    """Timezones fetched, no calendars or free probe, an email with Bob's time wrong: the
    progress is (1 + 0 + 0 + 3/4) / 4; a right email in the same place adds the last 1/4."""
    wrong = play(envs.make("meeting"), [call("get_timezone", person="Alice")
                 + call("get_timezone", person="Bob"), email("Alice: 16:00\nBob: 10:00"),
                 "Drafted."], instance=instance())  # fmt: skip
    right = play(envs.make("meeting"), [call("get_timezone", person="Alice")
                 + call("get_timezone", person="Bob"), email(GOOD[0]), "Drafted."],
                 instance=instance())  # fmt: skip
    assert wrong["termination"] == "failure" and right["termination"] == "success"
    assert wrong["reward"].layers["progress"] == pytest.approx((1 + 0.75) / 4)
    assert right["reward"].layers["progress"] == pytest.approx(2 / 4)


def test_level0_subtask_verifier():
    fam = MeetingFamily()
    inst = fam.sample(random.Random(4), 0)
    day, hhmm = inst.data["target"][:10], inst.data["target"][11:16]
    assert fam.check_answer(inst, f"It is {hhmm} there on {day}.")
    wrong = f"{(int(hhmm[:2]) + 1) % 24:02d}{hhmm[2:]}"
    assert not fam.check_answer(inst, f"It is {wrong} there on {day}.")
    assert not fam.check_answer(inst, f"It is {hhmm} or {wrong} on {day}.")


def test_reference_solves_every_level_and_levels_grow():
    env = envs.make("meeting")
    assert check_env(env, seeds=range(4))["success_rate"] == 1.0
    sizes = [len(MeetingFamily().sample(random.Random(1), lv).data["world"]["people"])
             for lv in (1, 2, 3)]  # fmt: skip
    assert sizes == [2, 3, 4]


def test_probe_order_and_the_first_free_start():
    """Starts inside the organizer's hours with room for the meeting, on the hour first; the
    tries stop at the first start free for everyone (14:00 Paris = 09:00 New York here)."""
    from agentrl.envs.tasks.meeting import first_free, probe_starts

    order = probe_starts(world())
    assert order[:9] == [f"{h:02d}:00" for h in range(9, 17)] + ["09:30"]
    assert "16:30" not in order[:30] and len(order) == len(set(order)) == 96
    assert first_free(world()) == ["09:00", "10:00", "11:00", "12:00", "13:00", "14:00"]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_probing_reference_tries_starts_in_order_and_notes_each_result(level):
    """``probe_slots``: one find_conflicts a turn in ``probe_starts`` order, only the last one
    free, each later try after a note naming the last one's conflicts; every turn with calls
    opens with a note and names only time zones read in earlier turns; the episode succeeds,
    every turn renders back to exactly its text; the instance is otherwise the default one."""
    from agentrl.chat.render import assistant_body
    from agentrl.envs.tasks.meeting import probe_starts
    from agentrl.tiny.builder import corpus_texts, train_tokenizer

    tok = train_tokenizer(corpus_texts(50, seed=1), vocab_size=300)
    env = envs.make("meeting", probe_slots=True, max_turns=40)
    env.reset(seed=3, options={"level": level})
    plain = MeetingFamily().sample(random.Random(3), level)
    assert (env.instance.task_id, env.instance.prompt) == (plain.task_id, plain.prompt)
    assert [c.name for c in plain.expected_calls].count("find_conflicts") == 1
    tries, notes = [], []
    for _ in range(env.max_turns):
        action = env.reference_action()
        read = "".join(m["content"] or "" for m in env.messages if m["role"] == "tool")
        for zone in re.findall(r'_timezone": "([^"]+)"|"timezone": "([^"]+)"', action):
            assert f'"{"".join(zone)}"' in read  # every zone named was read in an earlier turn
        _, _, done, _, info = env.step(action)
        if done:
            break
        assert not action.startswith("<tool_call>")  # a note first, always
        turn = [m for m in env.messages if m["role"] == "assistant"][-1]
        assert assistant_body(tok, turn, env.tool_schemas) == action
        probes = [e for e in env.call_log if e["name"] == "find_conflicts"]
        if '"find_conflicts"' in action:
            assert action.count("<tool_call>") == 1  # one try a turn
            tries.append(probes[-1])
            notes.append(action.split("<tool_call>")[0].strip())
    starts = [t["arguments"]["start"] for t in tries]
    assert info["success"] and starts == probe_starts(env.instance.data["world"])[: len(starts)]
    assert [t["content"].count('"free": true') for t in tries] == [0] * (len(tries) - 1) + [1]
    assert notes[0].startswith("I will try starts in my working hours")
    for before, note in zip(tries, notes[1:], strict=False):
        person = before["content"].split('"person": "')[1].split('"')[0]
        assert note.startswith(f"{before['arguments']['start']} is not free (") and person in note
