"""The base of every config section, and the check that refuses keys that moved."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def reject_moved_keys(data: Any, moved: dict[str, str], section: str) -> Any:
    """Refuse keys that moved, naming the new key (a before-validator of a section)."""
    if isinstance(data, dict):
        old = [k for k in data if k in moved]
        if old:
            hints = ", ".join(f"{section}.{k} -> {moved[k]}" for k in old)
            raise ValueError(f"config keys moved: {hints}")
    return data
