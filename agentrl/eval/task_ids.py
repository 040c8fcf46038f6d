"""What a task id says: ``<family>-L<level>-<hash>``, a library task's wrapping its family's."""

from __future__ import annotations

import re


def task_family(task_id: str) -> str | None:
    """The task family in a task id ``<family>-L<level>-<hash>``; a library task's id wraps its
    family's (``library-weather-L2-...`` -> ``weather``); None for an id of another shape (a
    plugin family's own)."""
    match = re.match(r"(.+?)-L\d+-", task_id)
    return match.group(1).removeprefix("library-") if match else None
