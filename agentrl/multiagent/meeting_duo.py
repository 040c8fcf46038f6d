"""Meeting duo: two assistants book a meeting that neither can book alone (``meeting_duo``).

The **calendar** agent holds the organizer's calendar (``find_free_slot``, ``book_meeting``);
the **contacts** agent holds the address book and the mail drafts (``lookup_contact``,
``draft_email``). Both have ``send_message(to, text)`` (``agentrl.multiagent.team``), the only
way anything one agent learned reaches the other. The booking needs the guests' email
addresses (contacts' side) and the invitation needs the booked time (calendar's side).

Levels: 1 = one guest, 30-minute meeting; 2 = two guests, 30 or 60 minutes.

Verifier (joint, on the world, not on either agent's words): the last booking is on the
meeting date at a time free in the organizer's calendar for the whole meeting, with exactly
the guests' addresses; the last draft goes to exactly those addresses and its body names the
date and the booked time. Each agent's milestones (its process reward): calendar - a slot
found, the time sent, a booking made; contacts - every guest looked up, every address sent,
a draft written.
"""

from __future__ import annotations

import random
import re
from datetime import date, timedelta

from agentrl.envs.reference import format_call
from agentrl.envs.task import TaskInstance
from agentrl.envs.tasks.meeting import PEOPLE, times_in
from agentrl.envs.tasks.names import name_key, name_resolver
from agentrl.tools.registry import Tool, tool
from agentrl.types import ToolCall

ROLES = ("calendar", "contacts")
DOMAINS = ("acme.com", "mail.org", "corp.net")
DAY_START, DAY_END = 9 * 60, 17 * 60  # the organizer's working hours, minutes after midnight
_EMAIL_RE = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _minutes(hhmm: str) -> int:
    if not re.fullmatch(r"([01]?\d|2[0-3]):[0-5]\d", str(hhmm).strip()):
        raise ValueError(f"Bad time {hhmm!r}: use HH:MM (24-hour).")
    h, m = str(hhmm).strip().split(":")
    return int(h) * 60 + int(m)


def slot_free(world: dict, start: int, minutes: int) -> bool:
    """Is ``[start, start + minutes)`` inside working hours and clear of every busy block?"""
    end = start + minutes
    if start < DAY_START or end > DAY_END:
        return False
    return all(end <= b0 or b1 <= start for b0, b1 in world["busy"])


def first_free(world: dict, minutes: int) -> int | None:
    """The earliest free start on the 30-minute grid (None if the day is full)."""
    for start in range(DAY_START, DAY_END - minutes + 1, 30):
        if slot_free(world, start, minutes):
            return start
    return None


def sample_world(rng: random.Random, level: int) -> dict:
    """Organizer, guests with addresses, the date, the length and the organizer's busy blocks."""
    names = rng.sample(PEOPLE, 1 + level)
    day = date(2025, 1, 6) + timedelta(days=rng.randrange(700))
    while day.weekday() >= 5:
        day += timedelta(days=1)
    minutes = 30 if level == 1 else rng.choice((30, 60))
    while True:
        busy = []
        for _ in range(rng.randint(2, 5)):
            start = rng.randrange(DAY_START, DAY_END - 30, 30)
            busy.append((start, start + rng.choice((30, 60, 90))))
        world = {"organizer": names[0], "date": day.isoformat(), "minutes": minutes,
                 "busy": sorted(busy)}  # fmt: skip
        if first_free(world, minutes) is not None:
            break
    world["contacts"] = {
        n: f"{n.lower()}.{rng.randrange(10, 100)}@{rng.choice(DOMAINS)}" for n in names[1:]
    }
    return world


def _prompts(world: dict) -> tuple[list[str], list[str]]:
    org, day, m = world["organizer"], world["date"], world["minutes"]
    guests = " and ".join(world["contacts"])
    system = [
        f"You are {org}'s calendar assistant. Your tools see only {org}'s calendar; the "
        "contacts assistant has the address book. Use send_message to talk to it.",
        f"You are {org}'s contacts assistant. Your tools see only the address book and the "
        "email drafts; the calendar assistant has the calendar. Use send_message to talk to it.",
    ]
    users = [
        f"Book a {m}-minute meeting on {day} with {guests}: find my first free slot, send the "
        "time to the contacts assistant, and book it with the guests' emails it sends you.",
        f"I am meeting {guests} on {day}. Look up their emails, send them to the calendar "
        "assistant, and draft the invitation with the time it sends you.",
    ]
    return system, users


def _scripts(world: dict) -> list[list[list[ToolCall] | str]]:
    """Each role's reference turns: lists of calls, then its final words."""
    day, m = world["date"], world["minutes"]
    start = _hhmm(first_free(world, m))
    emails = list(world["contacts"].values())
    addresses = ", ".join(f"{n} {e}" for n, e in world["contacts"].items())
    body = f"Hello, let's meet on {day} at {start} for {m} minutes."
    calendar = [
        [ToolCall("find_free_slot", {"date": day, "minutes": m})],
        [
            ToolCall(
                "send_message", {"to": "contacts", "text": f"The meeting is on {day} at {start}."}
            )
        ],  # fmt: skip
        [ToolCall("book_meeting", {"date": day, "time": start, "emails": emails})],
        f"I booked the meeting on {day} at {start}.",
    ]
    contacts = [
        [ToolCall("lookup_contact", {"name": n}) for n in world["contacts"]],
        [
            ToolCall("send_message", {"to": "calendar", "text": f"Emails: {addresses}."}),
            ToolCall("draft_email", {"to": emails, "subject": f"Meeting on {day}", "body": body}),
        ],  # fmt: skip
        "I drafted the invitation.",
    ]
    return [calendar, contacts]


class MeetingDuoFamily:
    """The two-agent meeting task (module docstring); a ``TeamFamily`` for ``TeamEnv``."""

    name = "meeting_duo"
    levels = (1, 2)
    roles = ROLES

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        """A world and each role's prompts, reference turns and expected calls."""
        world = sample_world(rng, level)
        system, users = _prompts(world)
        scripts = _scripts(world)
        expected = [[c for turn in s if isinstance(turn, list) for c in turn] for s in scripts]
        task_id = f"meeting_duo-L{level}-{rng.getrandbits(32):08x}"
        data = {"world": world, "system": system, "prompts": users, "scripts": scripts,
                "expected": expected}  # fmt: skip
        return TaskInstance(task_id, level, users[0], data, expected[0] + expected[1])

    def reference_turn(self, instance: TaskInstance, role: int, turn: int) -> str:
        """Role ``role``'s reference action at its turn ``turn`` (its final words past the end)."""
        script = instance.data["scripts"][role]
        step = script[min(turn, len(script) - 1)]
        return step if isinstance(step, str) else "\n".join(format_call(c) for c in step)

    def tools(self, instance: TaskInstance, role: int) -> list[Tool]:
        """The role's own tools, bound to the instance's world (``send_message`` is the env's)."""
        world = instance.data["world"]
        instance.data.setdefault("bookings", [])
        instance.data.setdefault("drafts", [])
        if role == 0:
            return _calendar_tools(world, instance.data["bookings"])
        return _contacts_tools(world, instance.data["drafts"])

    def check(self, instance: TaskInstance) -> bool:
        """The joint verifier (module docstring)."""
        world = instance.data["world"]
        bookings, drafts = instance.data.get("bookings"), instance.data.get("drafts")
        if not bookings or not drafts:
            return False
        booked, draft = bookings[-1], drafts[-1]
        emails = {name_key(e) for e in world["contacts"].values()}
        if booked["date"] != world["date"] or {name_key(e) for e in booked["emails"]} != emails:
            return False
        if not slot_free(world, _minutes(booked["time"]), world["minutes"]):
            return False
        body = str(draft["body"])
        return ({name_key(e) for e in draft["to"]} == emails and world["date"] in body
                and booked["time"] in times_in(body))  # fmt: skip

    def milestones(self, instance: TaskInstance, role: int, call_log: list[dict]) -> list[bool]:
        """The role's own milestones (module docstring), from its own call log."""
        world = instance.data["world"]
        ok = [e for e in call_log if e["ok"]]
        sent = " ".join(str(e["arguments"].get("text", "")) for e in ok
                        if e["name"] == "send_message")  # fmt: skip
        if role == 0:
            start = first_free(world, world["minutes"])
            return [any(e["name"] == "find_free_slot" for e in ok),
                    _hhmm(start) in times_in(sent),
                    any(e["name"] == "book_meeting" for e in ok)]  # fmt: skip
        looked = {name_key(e["arguments"].get("name")) for e in ok if e["name"] == "lookup_contact"}
        found = {name_key(e.rstrip(".")) for e in _EMAIL_RE.findall(sent)}
        return [all(name_key(n) in looked for n in world["contacts"]),
                all(name_key(e) in found for e in world["contacts"].values()),
                any(e["name"] == "draft_email" for e in ok)]  # fmt: skip


def _calendar_tools(world: dict, bookings: list) -> list[Tool]:
    def check_date(day: str) -> None:
        if str(day).strip() != world["date"]:
            raise ValueError(f"No calendar for {day!r}: the meeting is on {world['date']}.")

    @tool
    def find_free_slot(date: str, minutes: int) -> dict:
        """The organizer's first free slot on a date.

        Args:
            date: Date YYYY-MM-DD.
            minutes: Length of the meeting in minutes.
        """
        check_date(date)
        start = first_free(world, int(minutes))
        if start is None:
            raise ValueError(f"No free {minutes}-minute slot on {date}.")
        return {"date": world["date"], "time": _hhmm(start), "minutes": int(minutes)}

    @tool
    def book_meeting(date: str, time: str, emails: list[str]) -> dict:
        """Book a meeting in the organizer's calendar.

        Args:
            date: Date YYYY-MM-DD.
            time: Start time HH:MM.
            emails: The guests' email addresses.
        """
        check_date(date)
        if not slot_free(world, _minutes(time), world["minutes"]):
            raise ValueError(f"{time} is not free for {world['minutes']} minutes.")
        bookings.append({"date": world["date"], "time": _hhmm(_minutes(time)),
                         "emails": [str(e) for e in emails]})  # fmt: skip
        return {"status": "booked", "date": world["date"], "time": _hhmm(_minutes(time))}

    return [find_free_slot, book_meeting]


def _contacts_tools(world: dict, drafts: list) -> list[Tool]:
    resolve = name_resolver(world["contacts"], "Unknown contact {name!r}; known: {known}.")

    @tool
    def lookup_contact(name: str) -> dict:
        """A contact's email address.

        Args:
            name: The person's name.
        """
        person = resolve(name)
        return {"name": person, "email": world["contacts"][person]}

    @tool
    def draft_email(to: list[str], subject: str, body: str) -> dict:
        """Draft an email (it is not sent).

        Args:
            to: Recipient email addresses.
            subject: Subject line.
            body: The email text.
        """
        drafts.append({"to": [str(t) for t in to], "subject": subject, "body": body})
        return {"status": "drafted", "to": [str(t) for t in to]}

    return [lookup_contact, draft_email]


def world_secrets(instance: TaskInstance, role: int) -> list[str]:
    """Facts only role ``role``'s tools reveal (for information-separation checks)."""
    world = instance.data["world"]
    if role == 0:
        return [f'"time": "{_hhmm(first_free(world, world["minutes"]))}"']
    return list(world["contacts"].values())


__all__ = ["ROLES", "MeetingDuoFamily", "first_free", "sample_world", "slot_free",
           "world_secrets"]  # fmt: skip
