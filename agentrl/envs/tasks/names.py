"""Resolve the names a model writes (cities, people, item ids) to a world's own spelling."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def name_key(name: Any) -> str:
    """The matching key of a name: runs of whitespace as one space, stripped, casefolded."""
    return " ".join(str(name).split()).casefold()


def name_resolver(names: Iterable[str], unknown: str) -> Callable[[Any], str]:
    """A function from a model-written name to its spelling in ``names`` (see ``name_key``).

    An unknown name raises ``ValueError(unknown.format(name=<what was written>, known=<every
    name, comma-separated>))``, e.g. ``"Unknown city {name!r}."``: the tool's error message.
    """
    spelled = list(names)
    by_key = {name_key(n): n for n in spelled}
    known = ", ".join(spelled)

    def resolve(name: Any) -> str:
        found = by_key.get(name_key(name))
        if found is None:
            raise ValueError(unknown.format(name=name, known=known))
        return found

    return resolve
