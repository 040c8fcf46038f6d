"""Environment wrappers: one concern each, the wrapped env's API unchanged (gymnasium style).

``LastActions(env, k)`` (seed 000 §4.1: showing the agent its last few actions cures
repeated-call loops) appends a short list of the episode's last ``k`` tool calls, with their
outcome, to the last observation of every turn that produced one::

    {"city": "Paris", "temperature_c": 16}

    [your last 2 actions: 1. get_weather({"city": "Paris"}) -> ok; 2. get_weather({"city":
    "Paris"}) -> ok, a repeat of 1]

The note is part of the observation: the rollout renders it as a delta after the sampled
turn (DESIGN contract 1 holds) and the warm start's demonstrations carry it too when they are
played through the same wrapped env.
"""

from __future__ import annotations

import json
from typing import Any

from agentrl.envs.snapshot import EnvSnapshot, restore_episode
from agentrl.types import Message

NOTE_HEAD = "[your last {n} action{s}: "


def _call_text(name: str, arguments: Any) -> str:
    """``name({"arg": value})`` with the arguments as compact, key-sorted JSON."""
    try:
        args = json.dumps(arguments, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        args = repr(arguments)
    return f"{name}({args})"


def last_actions_note(call_log: list[dict[str, Any]], k: int) -> str:
    """The note for the last ``k`` entries of ``call_log`` ("" when there are none).

    Each entry reads ``name(args) -> ok`` or ``-> error <code>``; a call identical to an
    earlier one of the episode (same name and arguments) is marked ``a repeat of <j>``
    (``j``: its number in the note) or ``a repeat`` (when the earlier one scrolled out).
    """
    if k <= 0 or not call_log:
        return ""
    start = max(0, len(call_log) - k)
    shown = call_log[start:]
    texts = [_call_text(e.get("name", "?"), e.get("arguments")) for e in call_log]
    parts = []
    for j, entry in enumerate(shown):
        index = start + j
        text = texts[index]
        outcome = "ok" if entry.get("ok") else f"error {entry.get('error_code') or 'unknown'}"
        earlier = [i for i in range(index) if texts[i] == text]
        if earlier:
            first = earlier[-1]
            outcome += f", a repeat of {first - start + 1}" if first >= start else ", a repeat"
        parts.append(f"{j + 1}. {text} -> {outcome}")
    head = NOTE_HEAD.format(n=len(shown), s="" if len(shown) == 1 else "s")
    return head + "; ".join(parts) + "]"


class LastActions:
    """Wrap an env so each turn's last observation lists the episode's last ``k`` actions.

    Everything but ``step`` is the wrapped env's (attributes read through). The note is
    written into the observation message itself, so ``env.messages`` and the returned ``obs``
    stay the same objects the rollout renders.
    """

    def __init__(self, env: Any, k: int = 3) -> None:
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"LastActions needs k >= 1 actions to show, got {k!r}")
        self.env = env
        self.k = k

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def step(self, action_text: str):
        """The wrapped ``step``; its last observation gets the note (none if it has no obs)."""
        obs, reward, terminated, truncated, info = self.env.step(action_text)
        if obs and not (terminated or truncated):
            note = last_actions_note(self.env.call_log, self.k)
            if note:
                obs = list(obs)
                obs[-1] = self._annotate(obs[-1], note)
        return obs, reward, terminated, truncated, info

    def restore(self, snap: EnvSnapshot) -> list[Message]:
        """Rebuild ``snap``'s state by replaying through this wrapper (notes included)."""
        return restore_episode(self, snap)

    def _annotate(self, message: Message, note: str) -> Message:
        """``message`` with the note appended, replaced in ``env.messages`` as well."""
        annotated: Message = {**message, "content": f"{message.get('content', '')}\n\n{note}"}
        messages = self.env.messages
        for i in range(len(messages) - 1, -1, -1):
            if messages[i] is message:
                messages[i] = annotated
                break
        else:
            raise RuntimeError("LastActions: the observation is not in env.messages")
        return annotated
