"""The meeting family's tools, bound to one world (see ``meeting.py``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from agentrl.envs.tasks.meeting_time import local_dt, slot_problems, zone
from agentrl.envs.tasks.names import name_resolver
from agentrl.tools.registry import Tool, tool


def build_tools(world: dict, outbox: list) -> list[Tool]:
    """``get_timezone``, ``get_busy``, ``find_conflicts``, ``convert_time``, ``draft_email``."""
    roster = world["people"]
    resolve = name_resolver(roster, "Unknown person {name!r}; known: {known}.")
    return [*_calendar_tools(world, resolve), *_message_tools(outbox)]


def _calendar_tools(world: dict, resolve) -> list[Tool]:
    """``get_timezone``, ``get_busy``, ``find_conflicts``: lookups in the world's calendars."""
    roster = world["people"]

    @tool
    def get_timezone(person: str) -> dict:
        """A person's IANA time zone and local working hours.

        Args:
            person: The person's name.
        """
        p = resolve(person)
        info = roster[p]
        hours = {"start": info["work_start"], "end": info["work_end"]}
        return {"person": p, "timezone": info["timezone"], "working_hours": hours}

    @tool
    def get_busy(person: str, date: str, timezone: str) -> dict:
        """Calendar lookup: a person's busy intervals on a date, in the given time zone.

        Args:
            person: The person's name.
            date: Date YYYY-MM-DD in that time zone.
            timezone: IANA time zone of the date and of the returned times.
        """
        p = resolve(person)
        day0 = local_dt(date, "00:00", timezone)
        day1 = day0 + timedelta(days=1)
        busy = []
        for b0, b1 in roster[p]["busy"]:
            s, e = datetime.fromisoformat(b0), datetime.fromisoformat(b1)
            if s < day1 and day0 < e:
                s, e = (
                    max(s, day0).astimezone(zone(timezone)),
                    min(e, day1).astimezone(zone(timezone)),
                )
                busy.append({"start": f"{s:%H:%M}", "end": "24:00" if e == day1 else f"{e:%H:%M}"})
        return {"person": p, "date": date, "timezone": timezone, "busy": busy}

    @tool
    def find_conflicts(
        people: list[str], date: str, start: str, duration_minutes: int, timezone: str
    ) -> dict:
        """Conflict detection: is a slot free and inside working hours for everyone?

        Args:
            people: Names of all participants.
            date: Date YYYY-MM-DD of the slot in the given time zone.
            start: Start time HH:MM in the given time zone.
            duration_minutes: Length of the meeting in minutes.
            timezone: IANA time zone of date and start.
        """
        names = [resolve(n) for n in people]
        s = local_dt(date, start, timezone)
        sub = {**world, "people": {n: roster[n] for n in names}}
        conflicts = slot_problems(sub, s, int(duration_minutes))
        return {"free": not conflicts, "conflicts": conflicts}

    return [get_timezone, get_busy, find_conflicts]


def _message_tools(outbox: list) -> list[Tool]:
    """``convert_time`` and ``draft_email`` (drafts go to ``outbox``)."""

    @tool
    def convert_time(date: str, time: str, from_timezone: str, to_timezone: str) -> dict:
        """Convert a date and time from one time zone to another (DST-aware).

        Args:
            date: Date YYYY-MM-DD.
            time: Time HH:MM (24-hour).
            from_timezone: IANA time zone of the given date and time.
            to_timezone: IANA time zone to convert to.
        """
        out = local_dt(date, time, from_timezone).astimezone(zone(to_timezone))
        offset = out.utcoffset() or timedelta(0)
        hours = offset.total_seconds() / 3600
        return {"date": f"{out:%Y-%m-%d}", "time": f"{out:%H:%M}", "timezone": to_timezone,
                "utc_offset": f"{hours:+g}h"}  # fmt: skip

    @tool
    def draft_email(to: list[str], subject: str, body: str) -> dict:
        """Draft an email (it is not sent).

        Args:
            to: Recipient names.
            subject: Subject line.
            body: The email text.
        """
        outbox.append({"to": list(to), "subject": subject, "body": body})
        return {"status": "drafted", "draft": len(outbox), "to": list(to)}

    return [convert_time, draft_email]
