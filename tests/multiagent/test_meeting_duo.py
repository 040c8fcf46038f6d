"""meeting_duo and TeamEnv: the joint verifier, the reference team, the message channel,
information separation and the per-agent rewards (no model needed)."""

import json

import pytest

from agentrl.envs.reference import format_call
from agentrl.multiagent.meeting_duo import MeetingDuoFamily, first_free, world_secrets
from agentrl.multiagent.team import TeamEnv, team_breakdown
from agentrl.types import RewardBreakdown, ToolCall


def _env(**kw) -> TeamEnv:
    return TeamEnv(MeetingDuoFamily(), max_turns=kw.pop("max_turns", 6), **kw)


def _call(tool_name: str, **arguments) -> str:
    return format_call(ToolCall(tool_name, arguments))


def _play(env: TeamEnv, actions: list[str]) -> dict:
    """Step the agents in turn order with ``actions`` (each observes first); the last info."""
    info = {}
    for text in actions:
        env.observe(env.current)
        _, _, terminated, truncated, info = env.step(text)
        if terminated or truncated:
            break
    return info


def test_every_agent_sees_only_its_own_tools():
    env = _env()
    names = [[s["function"]["name"] for s in schemas] for schemas in env.tool_schemas]
    assert env.roles == ("calendar", "contacts")
    assert names == [["find_free_slot", "book_meeting", "send_message"],
                     ["lookup_contact", "draft_email", "send_message"]]  # fmt: skip
    env.reset(seed=1, options={"level": 1})
    _, _, _, _, info = env.step(_call("lookup_contact", name="Alice"))  # calendar's turn
    assert info["tool_calls"][0]["error_code"] == "unknown_tool"


@pytest.mark.parametrize("level", [1, 2])
def test_the_reference_team_succeeds_on_every_level(level):
    env = _env()
    for seed in range(25):
        info = env.play_reference(seed, level)
        assert info["termination"] == "success", (seed, level)
        # every agent reached all its milestones; the outcome layer is shared
        assert [b.layers["progress"] for b in info["agent_rewards"]] == [1.0, 1.0]
        assert env.turns == [4, 3]


def test_verifier_needs_both_sides():
    """Booking without the contacts' addresses or drafting without the calendar's time fails;
    the reference's actions with one fact changed fail too."""
    env = _env()
    env.reset(seed=4, options={"level": 1})
    world = env.instance.data["world"]
    day, minutes = world["date"], world["minutes"]
    start = first_free(world, minutes)
    hhmm = f"{start // 60:02d}:{start % 60:02d}"
    ((guest, email),) = world["contacts"].items()
    body = f"Meet on {day} at {hhmm}."

    def outcome(book_emails, draft_to, draft_body, time=hhmm) -> str:
        env.reset(seed=4, options={"level": 1})
        return _play(env, [
            _call("book_meeting", date=day, time=time, emails=book_emails),
            _call("draft_email", to=draft_to, subject="Meeting", body=draft_body),
            "Booked.", "Drafted.",
        ])["termination"]  # fmt: skip

    assert outcome([email], [email], body) == "success"
    assert outcome([f"{guest.lower()}@example.com"], [email], body) == "failure"  # guessed
    assert outcome([email], [email], f"Meet on {day} soon.") == "failure"  # no time
    assert outcome([email], [email], body.replace(day, "2024-01-01")) == "failure"
    busy0 = world["busy"][0][0]
    bad = f"{busy0 // 60:02d}:{busy0 % 60:02d}"
    assert outcome([email], [email], f"Meet on {day} at {bad}.", time=bad) == "failure"


def test_messages_cross_only_through_the_channel():
    env = _env()
    env.reset(seed=2, options={"level": 2})
    inst = env.instance
    emails = world_secrets(inst, 1)
    lookups = "\n".join(_call("lookup_contact", name=n) for n in inst.data["world"]["contacts"])
    _play(env, [_call("find_free_slot", date=inst.data["world"]["date"], minutes=30), lookups,
                _call("book_meeting", date="x", time="09:00", emails=[])])  # fmt: skip
    assert env.observe(env.current)[0]["name"] == "lookup_contact"  # the contacts' turn
    seen_by = [json.dumps(view) for view in env.messages]
    assert all(e in seen_by[1] for e in emails)  # the contacts agent looked them up
    assert not any(e in seen_by[0] for e in emails)  # the calendar agent never saw them
    assert world_secrets(inst, 0)[0] not in seen_by[1]
    # now the contacts agent sends them: they reach the calendar agent as a user message
    env.step(_call("send_message", to="Calendar", text=f"Emails: {', '.join(emails)}"))
    new = env.observe(0)
    assert new[-1]["role"] == "user" and new[-1]["content"].startswith("[from contacts] Emails:")
    assert all(e in json.dumps(env.messages[0]) for e in emails)
    env.step(_call("send_message", to="calendar", text="to myself"))  # calendar: refused
    result = env.observe(0)[0]
    assert result["role"] == "tool" and "Unknown recipient" in result["content"]


def test_per_agent_rewards_and_the_team_total():
    """Agent k: shared completion + its own process layers; team = layer-wise mean."""
    env = _env()
    env.reset(seed=3, options={"level": 1})
    world = env.instance.data["world"]
    info = _play(env, [_call("find_free_slot", date=world["date"], minutes=30),
                       "I cannot help.", "Nothing to do."])  # fmt: skip
    assert info["termination"] == "failure"
    cal, con = info["agent_rewards"]
    assert cal.layers["completion"] == con.layers["completion"] == 0.0
    assert cal.layers["progress"] == pytest.approx(1 / 3)  # found the slot, sent and booked not
    assert con.layers["progress"] == 0.0
    assert con.layers["format"] == 0.0  # expected calls, made none
    w = cal.weights
    # calendar: format 1, tool_choice 1, arguments 1/3 (1 of 3 expected calls), progress 1/3
    assert cal.total == pytest.approx(w["format"] + w["tool_choice"] + w["arguments"] / 3
                                      + w["progress"] / 3)  # fmt: skip
    assert info["reward"].total == pytest.approx((cal.total + con.total) / 2)
    assert env.finish("length") is env.breakdowns  # idempotent once ended
    both = team_breakdown([RewardBreakdown({"completion": 1.0, "progress": 1.0}, w),
                           RewardBreakdown({"completion": 1.0, "progress": 0.0}, w)])  # fmt: skip
    assert both.layers == {"completion": 1.0, "progress": 0.5}


def test_turn_limits_and_bad_options():
    env = _env(max_turns=2)
    env.reset(seed=0, options={"level": 1})
    info = _play(env, [_call("find_free_slot", date="2020-01-01", minutes=30)] * 4)
    assert info["termination"] == "max_turns" and env.turns == [2, 1]
    with pytest.raises(ValueError, match="level 7"):
        env.reset(seed=0, options={"level": 7})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(seed=0, options={"instance": None})
    with pytest.raises(ValueError, match="max_turns"):
        _env(max_turns=0)
