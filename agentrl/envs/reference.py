"""The generic reference solver: issue each expected call, retry failures, then answer.

Its actions are written exactly as the Qwen2.5 chat template renders an assistant tool call
(``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``), so a reference episode
rendered by the template is token-identical to the policy producing the same text: these
episodes serve as SFT demonstrations and as the check that every task is solvable.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.rewards.layers import call_key
from agentrl.types import Message, ToolCall


def format_call(call: ToolCall) -> str:
    """One call as the chat template renders it (``json.dumps`` default separators)."""
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def successful_results(
    expected: Sequence[ToolCall], call_log: Sequence[dict[str, Any]]
) -> dict[int, Any]:
    """``{i: decoded result}`` for each expected call already made with a successful result."""
    results: dict[int, Any] = {}
    for i, call in enumerate(expected):
        key = call_key(call)
        for entry in call_log:
            if entry["ok"] and call_key(ToolCall(entry["name"], entry["arguments"])) == key:
                try:
                    results[i] = json.loads(entry["content"])
                except json.JSONDecodeError:
                    results[i] = entry["content"]
                break
    return results


def with_note(
    family: TaskFamily, instance: TaskInstance, results: dict[int, Any], calls: str
) -> str:
    """``calls`` after the family's note for this point of the episode, if it writes one.

    A family may define ``reference_note(instance, results) -> str``: a line of working the
    reference writes before its calls (e.g. the largest balance read so far), so its
    demonstrations teach the model to keep that fact in view. Text then a call is one turn,
    rendered by the template as the content before the ``<tool_call>`` block.
    """
    note_fn = getattr(family, "reference_note", None)
    note = note_fn(instance, results) if note_fn is not None else ""
    return f"{note}\n{calls}" if note else calls


def reference_action(
    family: TaskFamily, instance: TaskInstance, call_log: Sequence[dict[str, Any]]
) -> str:
    """The next action: the first expected call without a successful result, else the answer.

    A call whose result was an error is simply issued again (a retry), one call per turn.
    """
    results = successful_results(instance.expected_calls, call_log)
    for i, call in enumerate(instance.expected_calls):
        if i not in results:
            return with_note(family, instance, results, format_call(call))
    return family.reference_answer(instance, results)


def run_reference_episode(
    env: Any, seed: int | None = None, level: int | None = None
) -> tuple[list[Message], dict[str, Any]]:
    """Play one episode with ``env.reference_action()``; return (messages, final step info).

    The final info holds ``termination``, ``reward`` (a ``RewardBreakdown``) and ``success``,
    plus ``task_id``, ``level`` and ``seed`` from ``reset``.
    """
    options = {} if level is None else {"level": level}
    _, reset_info = env.reset(seed=seed, options=options)
    for _ in range(env.max_turns + 1):
        _, _, terminated, truncated, info = env.step(env.reference_action())
        if terminated or truncated:
            return [dict(m) for m in env.messages], {**reset_info, **info}
    raise AssertionError(f"episode did not end within max_turns={env.max_turns} turns")
