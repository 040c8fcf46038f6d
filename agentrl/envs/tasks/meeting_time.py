"""Time arithmetic of the meeting family (``meeting.py``) and its tools (``meeting_tools.py``).

Zone lookup with an error the model can read, aware datetimes from ``YYYY-MM-DD`` and
``HH:MM``, and ``slot_problems``, the check that a slot suits every participant.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def zone(name: str) -> ZoneInfo:
    """A ``ZoneInfo`` or a ``ValueError`` the model can read."""
    try:
        return ZoneInfo(str(name).strip())
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(
            f"Unknown time zone {name!r}; use an IANA name like 'Europe/Paris'."
        ) from exc


def local_dt(day: str, hhmm: str, tz: str) -> datetime:
    """An aware datetime from ``YYYY-MM-DD`` and ``HH:MM`` in zone ``tz``."""
    try:
        naive = datetime.strptime(f"{day} {hhmm}", "%Y-%m-%d %H:%M")
    except ValueError as exc:
        raise ValueError(f"Bad date/time {day!r} {hhmm!r}: use YYYY-MM-DD and HH:MM.") from exc
    return naive.replace(tzinfo=zone(tz))


def _minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


def slot_problems(world: dict, start: datetime, minutes: int) -> list[dict[str, str]]:
    """Why a slot does not suit each participant (empty list: free for everyone)."""
    end = start + timedelta(minutes=minutes)
    out = []
    for name, p in world["people"].items():
        tz = ZoneInfo(p["timezone"])
        ls, le = start.astimezone(tz), end.astimezone(tz)
        lo, hi = _minutes(p["work_start"]), _minutes(p["work_end"])
        s_min = ls.hour * 60 + ls.minute
        e_min = s_min + minutes
        if ls.date() != (le - timedelta(minutes=1)).date() or s_min < lo or e_min > hi:
            out.append({"person": name, "reason": "outside working hours"})
            continue
        for b0, b1 in p["busy"]:
            if datetime.fromisoformat(b0) < end and start < datetime.fromisoformat(b1):
                out.append({"person": name, "reason": "busy"})
                break
    return out
