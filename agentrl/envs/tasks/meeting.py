"""Meeting: arrange a meeting across time zones (curriculum stage 2, ``make("meeting")``).

A world: 2-4 participants, each with a real IANA time zone, working hours and a busy
calendar (stored in UTC). Time arithmetic uses ``zoneinfo`` (DST included); levels 2-3 pick
dates inside the weeks where the US and Europe have changed their clocks on different days.

Tools: ``get_timezone(person)``, ``get_busy(person, date, timezone)`` (calendar lookup),
``find_conflicts(people, date, start, duration_minutes, timezone)`` (conflict detection),
``convert_time(date, time, from_timezone, to_timezone)`` and ``draft_email(to, subject, body)``.

Levels: 0 = a decomposed sub-task (convert one proposed time into a colleague's local time);
1 = two people; 2 = three people on a DST-mismatch date; 3 = four people, longer meetings.

``probe_slots=True`` (``task.env_kwargs.probe_slots``): the reference solver finds its slot the
way a model can, by trying starts with ``find_conflicts`` in a fixed order (``probe_starts``:
the organizer's working hours on the hour, then at :30, :15 and :45, then the rest of the day)
and keeping the first free one, with a note before each try naming what the last one hit
(every turn opens with a note: its first token never chooses between a note and a call); by
default it names one free slot drawn from the hidden calendars at once, a guess to a model that
imitates it. It also reads the time zones a turn before it asks for calendars in the
organizer's (by default both come in the first turn, the zone named before it was read). The
task and its verifier are unchanged; episodes get one turn per try (levels 1 / 2 / 3 need a
median of 3 / 5 / 6 tries, 90th percentile 8 / 10 / 14), so raise ``task.max_turns``.

Verifier: level 0 - the answer gives the converted 24-hour time (and the local date when it
differs) and no other time. Levels 1-3 - the last drafted email goes to every other
participant and, on a line naming each participant, states the start of one slot in that
person's local time (with the local date when it differs from the organizer's); the slot
must lie inside every participant's working hours and be free in every calendar.

Process reward (``progress``, levels 1-3): the time zones read, the calendars read, a free
start found, and the last email graded by ``email_score`` (the share of its checks that pass),
so a draft with most local times right earns more than one with none.
"""

from __future__ import annotations

import random
import re
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.envs.tasks.meeting_time import local_dt, slot_problems
from agentrl.envs.tasks.meeting_tools import build_tools
from agentrl.envs.tasks.shaped import duplicate_results
from agentrl.tools.registry import Tool
from agentrl.types import ToolCall

PEOPLE = (
    "Alice", "Bruno", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ines", "Jonas",
    "Kenji", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq",
)  # fmt: skip
ZONES = (
    "Europe/London", "Europe/Paris", "Europe/Berlin", "Europe/Helsinki", "America/New_York",
    "America/Chicago", "America/Denver", "America/Los_Angeles", "America/Sao_Paulo",
    "Africa/Johannesburg", "Asia/Dubai", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Singapore",
    "Asia/Tokyo", "Australia/Sydney", "Pacific/Auckland",
)  # fmt: skip
#: Weekdays where US and EU clocks disagree about DST (first days of each window).
DST_WINDOWS = ((date(2025, 3, 10), 15), (date(2025, 10, 27), 5), (date(2026, 3, 9), 15))
SYSTEM_PROMPT = (
    "You are a scheduling assistant. Use the tools; write times as 24-hour HH:MM and dates "
    "as YYYY-MM-DD."
)
MAX_ANSWER_CHARS = 600
_TIME_RE = re.compile(r"(?<![\d:])([01]?\d|2[0-3]):([0-5]\d)(?![\d:])")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_PEOPLE_BY_LEVEL = {0: 2, 1: 2, 2: 3, 3: 4}


def times_in(text: str) -> list[str]:
    """``HH:MM`` times in ``text`` (24-hour), zero-padded, in order."""
    return [f"{int(h):02d}:{m}" for h, m in _TIME_RE.findall(text)]


def _busy(rng: random.Random, tz: str, around: date, work: tuple[int, int], n: int) -> list:
    events = []
    for offset in (-1, 0, 1):
        day = around + timedelta(days=offset)
        for _ in range(n):
            start = rng.randrange(work[0] * 2, work[1] * 2 - 1) * 30
            length = rng.choice((30, 60, 90, 120))
            s = datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(tz)) + timedelta(
                minutes=start
            )
            e = s + timedelta(minutes=length)
            events.append(
                (
                    s.astimezone(ZoneInfo("UTC")).isoformat(),
                    e.astimezone(ZoneInfo("UTC")).isoformat(),
                )
            )
    return sorted(events)


def _pick_date(rng: random.Random, level: int) -> date:
    if level >= 2:
        first, span = rng.choice(DST_WINDOWS)
        days = [first + timedelta(days=i) for i in range(span)]
    else:
        days = [date(2025, 1, 6) + timedelta(days=i) for i in range(700)]
    return rng.choice([d for d in days if d.weekday() < 5])


def sample_world(rng: random.Random, level: int) -> tuple[dict, list[datetime]]:
    """Participants, calendars and the feasible slots (15-minute grid, organizer's date)."""
    n = _PEOPLE_BY_LEVEL[level]
    minutes = {0: 60, 1: 60, 2: rng.choice((30, 60)), 3: rng.choice((60, 90))}[level]
    for _ in range(1000):
        names = rng.sample(PEOPLE, n)
        zones = rng.sample(ZONES, n)
        day = _pick_date(rng, level)
        people = {}
        for name, tz in zip(names, zones, strict=True):
            ws = rng.choice((7, 8, 9, 10))
            we = ws + rng.choice((8, 9, 10))
            people[name] = {
                "timezone": tz,
                "work_start": f"{ws:02d}:00",
                "work_end": f"{we:02d}:00",
                "busy": _busy(rng, tz, day, (ws, we), rng.randint(1, 1 + level)),
            }
        world = {"people": people, "organizer": names[0], "date": day.isoformat(),
                 "minutes": minutes}  # fmt: skip
        org = local_dt(day.isoformat(), "00:00", zones[0])
        slots = [org + timedelta(minutes=15 * k) for k in range(96)]
        slots = [s for s in slots if s.date() == org.date()]
        free = [s for s in slots if not slot_problems(world, s, minutes)]
        if free or level == 0:
            return world, free
    raise RuntimeError("meeting: no feasible world found in 1000 draws")


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def probe_starts(world: dict) -> list[str]:
    """Every 15-minute start of the organizer's day, in the order a probing solver tries them:
    starts whose meeting fits the organizer's working hours, on the hour, then at :30, :15 and
    :45; then the rest of the day in time order."""
    org = world["people"][world["organizer"]]
    lo, hi = (int(org[k][:2]) * 60 + int(org[k][3:]) for k in ("work_start", "work_end"))
    inside = [h * 60 + m for m in (0, 30, 15, 45) for h in range(24)
              if lo <= h * 60 + m and h * 60 + m + world["minutes"] <= hi]  # fmt: skip
    return [_hhmm(t) for t in inside] + [_hhmm(t) for t in range(0, 1440, 15) if t not in inside]


def first_free(world: dict) -> list[str]:
    """The starts ``probe_starts`` tries up to and including the first free one."""
    org_tz = world["people"][world["organizer"]]["timezone"]
    tried = []
    for start in probe_starts(world):
        tried.append(start)
        if not slot_problems(world, local_dt(world["date"], start, org_tz), world["minutes"]):
            return tried
    raise ValueError("meeting: no free 15-minute start on the organizer's date")


class MeetingFamily(TaskFamily):
    """Cross-time-zone meeting scheduling with conflict detection and an email draft."""

    name = "meeting"
    levels = (0, 1, 2, 3)
    system_prompt = SYSTEM_PROMPT

    def __init__(self, probe_slots: bool = False) -> None:
        self.probe_slots = bool(probe_slots)

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        """A world and a request at ``level``; the reference picks a random free slot, or with
        ``probe_slots`` tries starts in ``probe_starts`` order up to the first free one."""
        world, free = sample_world(rng, level)
        names = list(world["people"])
        org, day = world["organizer"], world["date"]
        org_tz = world["people"][org]["timezone"]
        task_id = f"meeting-L{level}-{rng.getrandbits(32):08x}"
        if level == 0:
            hhmm = f"{rng.randrange(7, 19):02d}:{rng.choice((0, 15, 30, 45)):02d}"
            return self._subtask(task_id, world, hhmm)
        slot = rng.choice(free)
        tries = [slot.strftime("%H:%M")]
        if self.probe_slots:
            tries = first_free(world)
            slot = local_dt(day, tries[-1], org_tz)
        start = tries[-1]
        others = names[1:]
        calls = [ToolCall("get_timezone", {"person": p}) for p in names]
        calls += [
            ToolCall("get_busy", {"person": p, "date": day, "timezone": org_tz}) for p in names
        ]
        calls += [ToolCall("find_conflicts", {
            "people": names, "date": day, "start": t,
            "duration_minutes": world["minutes"], "timezone": org_tz}) for t in tries]  # fmt: skip
        for p in others:
            calls.append(ToolCall("convert_time", {
                "date": day, "time": start, "from_timezone": org_tz,
                "to_timezone": world["people"][p]["timezone"]}))  # fmt: skip
        body = self.email_body(world, slot)
        subject = f"Meeting on {day}"
        calls.append(ToolCall("draft_email", {"to": others, "subject": subject, "body": body}))
        n_try = len(tries)  # one turn per try: each waits for the last one's result
        # probing: get_busy names the organizer's time zone, so only once it is read
        busy = 1 if self.probe_slots else 0
        stages = [0] * len(names) + [busy] * len(names) + list(range(busy + 1, busy + n_try + 1))
        stages += [busy + n_try + 1] * len(others) + [busy + n_try + 2]
        prompt = (
            f"I am {org}. Find a {world['minutes']}-minute slot on {day} (my date) when "
            f"{', '.join(others)} and I are all free and inside everyone's working hours, then "
            "draft the invitation email to them giving the time in each person's local time."
        )
        data = {"world": world, "slot": slot.isoformat(), "stages": stages}
        return TaskInstance(task_id, level, prompt, data, calls)

    def _subtask(self, task_id: str, world: dict, hhmm: str) -> TaskInstance:
        a, b = list(world["people"])
        tz_a, tz_b = world["people"][a]["timezone"], world["people"][b]["timezone"]
        day = world["date"]
        target = local_dt(day, hhmm, tz_a).astimezone(ZoneInfo(tz_b))
        calls = [ToolCall("get_timezone", {"person": a}), ToolCall("get_timezone", {"person": b})]
        calls.append(ToolCall("convert_time", {
            "date": day, "time": hhmm, "from_timezone": tz_a, "to_timezone": tz_b}))  # fmt: skip
        prompt = f"I am {a}. What is {day} {hhmm} my time in {b}'s local time?"
        data = {"world": world, "time": hhmm, "target": target.isoformat(), "stages": [0, 0, 1]}
        return TaskInstance(task_id, 0, prompt, data, calls)

    @staticmethod
    def email_body(world: dict, slot: datetime) -> str:
        """The reference email: one line per participant with their local date and time."""
        lines = [f"Hello, let's meet for {world['minutes']} minutes."]
        for p, info in world["people"].items():
            loc = slot.astimezone(ZoneInfo(info["timezone"]))
            lines.append(f"{p}: {loc:%Y-%m-%d %H:%M} ({info['timezone']})")
        return "\n".join(lines)

    def tools(self, instance: TaskInstance) -> list[Tool]:
        """The five scheduling tools, bound to the instance's world (see the module docs)."""
        instance.data["outbox"] = []
        return build_tools(instance.data["world"], instance.data["outbox"])

    def check_answer(self, instance: TaskInstance, answer: str) -> bool:
        """The rule-based verifier (see the module docstring)."""
        if not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
            return False
        world = instance.data["world"]
        if instance.level == 0:
            target = datetime.fromisoformat(instance.data["target"])
            found = times_in(answer)
            if f"{target:%H:%M}" not in found or set(found) - {
                f"{target:%H:%M}",
                instance.data["time"],
            }:
                return False
            return target.date().isoformat() == world["date"] or target.date().isoformat() in answer
        drafts = instance.data.get("outbox") or []
        return bool(drafts) and email_ok(world, drafts[-1])

    def reference_answer(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """A one-line summary (level 0: the converted time)."""
        if instance.level == 0:
            r = results[2]
            return f"That is {r['time']} on {r['date']} in {r['timezone']}."
        slot = datetime.fromisoformat(instance.data["slot"])
        return f"I drafted the invitation for {slot:%Y-%m-%d %H:%M} your time."

    def reference_note(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """With ``probe_slots``, a note opens every turn, so a turn's first token never has
        to choose between a note and a call: the step it takes ("First, everyone's time zone
        and working hours."), before each try what the last one hit ("09:00 is not free
        (Bruno busy). Next try: 10:00.") and after the free one that it is free. Nothing
        otherwise (and nothing before the answer)."""
        calls = instance.expected_calls
        nxt = next((i for i in range(len(calls)) if i not in results), None)
        if not self.probe_slots or instance.level == 0 or nxt is None:
            return ""
        if nxt == 0:
            return "First, everyone's time zone and working hours."
        world = instance.data["world"]
        org = world["people"][world["organizer"]]
        prev, call = calls[nxt - 1], calls[nxt]
        if call.name == "get_busy":
            return (
                f"Next, everyone's calendar on {world['date']} in my time zone ({org['timezone']})."
            )
        if call.name == "draft_email":
            return "Now the invitation, with each person's local time."
        if prev.name != "find_conflicts":
            hours = f"{org['work_start']}-{org['work_end']}"
            first = call.arguments["start"]
            return f"I will try starts in my working hours ({hours}), on the hour first: {first}."
        tried = prev.arguments["start"]
        if call.name != "find_conflicts":
            return f"{tried} is free for everyone."
        hits = (results.get(nxt - 1) or {}).get("conflicts") or []
        why = "; ".join(f"{c['person']} {c['reason']}" for c in hits)
        return f"{tried} is not free ({why}). Next try: {call.arguments['start']}."

    def process_layers(self, instance: TaskInstance, call_log: list[dict]) -> dict[str, float]:
        """``progress``: milestones reached (the last, the email, graded by ``email_score``);
        ``reask``: information fetched twice."""
        world, outbox = instance.data["world"], instance.data.get("outbox") or []
        names = list(world["people"])
        ok = [e for e in call_log if e["ok"]]

        def fetched(tool_name: str) -> bool:
            got = {
                str(e["arguments"].get("person", "")).casefold()
                for e in ok
                if e["name"] == tool_name
            }
            return all(n.casefold() in got for n in names)

        if instance.level == 0:
            want = instance.expected_calls[2].arguments
            steps = [
                fetched("get_timezone"),
                any(e["name"] == "convert_time" and e["arguments"] == want for e in ok),
            ]
        else:
            steps = [
                fetched("get_timezone"),
                fetched("get_busy"),
                any(e["name"] == "find_conflicts" and '"free": true' in e["content"] for e in ok),
                email_score(world, outbox[-1]) if outbox else 0.0,
            ]
        return {"progress": sum(steps) / len(steps), "reask": float(duplicate_results(call_log))}


def _person_line(body: str, name: str) -> str | None:
    pat = re.compile(rf"(?<!\w){re.escape(name.casefold())}(?!\w)")
    for line in body.splitlines():
        if pat.search(line.casefold()) and times_in(line):
            return line
    return None


def email_ok(world: dict, draft: dict) -> bool:
    """Does ``draft`` invite everyone to one feasible slot, in each person's local time?"""
    return email_score(world, draft) == 1.0


def email_score(world: dict, draft: dict) -> float:
    """The share of the email's checks that pass (1.0 exactly when ``email_ok``).

    Checks: everyone else is invited; the organizer's line names a start (its first time) that
    is free and inside everyone's hours; and, for each person, their line gives that start's
    local time (with the date where it differs) and at most two times. Without a start on the
    organizer's line only the invitation can pass. A graded process step: a draft with three of
    four local times right scores above one with none, where the verifier fails both.
    """
    people = world["people"]
    org = world["organizer"]
    to = {str(t).strip().casefold() for t in draft.get("to", [])}
    passed = [all(p.casefold() in to for p in people if p != org)]
    total = 2 + len(people)
    body = str(draft.get("body", ""))
    lines = {p: _person_line(body, p) for p in people}
    if lines[org] is None:
        return sum(passed) / total
    start = local_dt(world["date"], times_in(lines[org])[0], people[org]["timezone"])
    passed.append(not slot_problems(world, start, world["minutes"]))
    for p, info in people.items():
        loc = start.astimezone(ZoneInfo(info["timezone"]))
        line = lines[p]
        passed.append(
            line is not None
            and len(times_in(line)) <= 2
            and times_in(line)[0] == f"{loc:%H:%M}"
            and (loc.date().isoformat() == world["date"] or loc.date().isoformat() in line)
        )
    return sum(passed) / total
