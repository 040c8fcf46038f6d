"""An episode's dialogue cut into its head (system + task) and its turns.

A *turn* is one assistant message followed by the environment's messages that answered it
(tool results, parse errors), in ``env.messages`` order: ``turns[i]`` is assistant turn
``i`` (0-based, the index of ``RewardBreakdown.per_turn``).
"""

from __future__ import annotations

from agentrl.types import Message

Turn = list[Message]


def split_turns(messages: list[Message]) -> tuple[list[Message], list[Turn]]:
    """``(head, turns)``: the messages before the first assistant one, then one list per
    assistant message with the messages after it up to the next assistant message."""
    head: list[Message] = []
    turns: list[Turn] = []
    for m in messages:
        if m.get("role") == "assistant":
            turns.append([m])
        elif turns:
            turns[-1].append(m)
        else:
            head.append(m)
    return head, turns


def turn_text(turn: Turn) -> str:
    """Plain text of a turn (assistant text, its calls, the tool results), for hashing."""
    parts: list[str] = []
    for m in turn:
        parts.append(str(m.get("content") or ""))
        for call in m.get("tool_calls") or []:
            fn = call.get("function", call)
            parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return "\n".join(p for p in parts if p)
