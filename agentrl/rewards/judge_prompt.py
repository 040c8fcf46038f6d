"""What an LLM judge reads and how its reply is read (pure functions, no I/O).

``absolute`` mode: one episode per request, the reply is a score in [0, 1]. ``relative`` mode
(as OpenPipe ART's RULER): the G episodes of one group in one request, the reply scores each
(``{"scores": [...]}``) or ranks them best first (``{"ranking": [3, 1, 2]}``, 1-based), and a
ranking becomes evenly spaced scores, best 1.0, worst 0.0. A reply that says anything else
(no number, a number outside [0, 1], the wrong count) parses to ``None``: a judge fault, never
a score of 0 for the episode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from agentrl.types import Message

ABSOLUTE_FORMAT = 'Reply with only a JSON object: {"score": <a number from 0 to 1>}.'
RELATIVE_FORMAT = (
    'Reply with only a JSON object: {"scores": [<one number from 0 to 1 per attempt, in '
    "attempt order>]}."
)
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"


def task_text(messages: Sequence[Message]) -> str:
    """The task: the episode's first user message."""
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def transcript(messages: Sequence[Message], max_chars: int = 4000) -> str:
    """The episode after its task as plain lines (calls as JSON); the tail kept if too long."""
    lines: list[str] = []
    seen_task = False
    for m in messages:
        role = m.get("role")
        if role == "system" or (role == "user" and not seen_task):
            seen_task = seen_task or role == "user"
            continue
        content = str(m.get("content") or "").strip()
        if role == "assistant":
            for call in m.get("tool_calls") or []:
                fn = call.get("function", call)
                args = json.dumps(fn.get("arguments"), sort_keys=True, default=str)
                lines.append(f"assistant calls {fn.get('name')}({args})")
            if content:
                lines.append(f"assistant: {content}")
        elif role == "tool":
            name = m.get("name")
            lines.append(f"tool {name}: {content}" if name else f"tool: {content}")
        else:
            lines.append(f"{role}: {content}")
    text = "\n".join(lines) or "(the assistant said nothing)"
    return text if len(text) <= max_chars else "..." + text[-max_chars:]


def absolute_messages(rubric: str, task: str, episode: str) -> list[Message]:
    """The chat request scoring one episode."""
    system = f"You grade one attempt of an AI assistant at a task.\nRubric: {rubric}\n"
    user = f"Task:\n{task}\n\nAttempt:\n{episode}\n\n{ABSOLUTE_FORMAT}"
    return [{"role": "system", "content": system + ABSOLUTE_FORMAT},
            {"role": "user", "content": user}]  # fmt: skip


def relative_messages(rubric: str, task: str, episodes: Sequence[str]) -> list[Message]:
    """The chat request scoring a group's episodes together (numbered from 1)."""
    system = (f"You compare {len(episodes)} attempts of an AI assistant at the same task and "
              f"score each relative to the others.\nRubric: {rubric}\n")  # fmt: skip
    blocks = "\n\n".join(f"Attempt {i}:\n{e}" for i, e in enumerate(episodes, 1))
    user = f"Task:\n{task}\n\n{blocks}\n\n{RELATIVE_FORMAT}"
    return [{"role": "system", "content": system + RELATIVE_FORMAT},
            {"role": "user", "content": user}]  # fmt: skip


def _json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (code fences and prose around it ignored)."""
    for match in re.finditer(r"\{", text):
        try:
            value, _ = json.JSONDecoder().raw_decode(text[match.start() :])
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _unit(value: Any) -> float | None:
    """``value`` as a float in [0, 1], else None (bools and NaN refused)."""
    if isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if 0.0 <= x <= 1.0 else None


def parse_score(text: str) -> float | None:
    """A score in [0, 1] from a judge's reply: ``{"score": x}``, ``score: x`` or a lone number.

    >>> parse_score('```json\\n{"score": 0.8}\\n```'), parse_score("Score: 1"), parse_score("7")
    (0.8, 1.0, None)
    """
    obj = _json_object(text)
    if obj is not None and "score" in obj:
        return _unit(obj["score"])
    found = re.findall(rf"score\W{{0,3}}({_NUMBER})", text, flags=re.I)
    if found:
        return _unit(found[-1])
    lone = re.fullmatch(rf"\s*({_NUMBER})\s*\.?\s*", text)
    return _unit(lone.group(1)) if lone else None


def ranking_scores(ranking: Sequence[Any], n: int) -> list[float] | None:
    """A 1-based ranking, best first, as scores: best 1.0, worst 0.0, evenly spaced.

    >>> ranking_scores([2, 3, 1], 3)
    [0.5, 1.0, 0.0]
    """
    try:
        order = [int(r) for r in ranking]
    except (TypeError, ValueError):
        return None
    if sorted(order) != list(range(1, n + 1)):
        return None
    scores = [0.0] * n
    for pos, attempt in enumerate(order):
        scores[attempt - 1] = 1.0 if n == 1 else (n - 1 - pos) / (n - 1)
    return scores


def parse_scores(text: str, n: int) -> list[float] | None:
    """``n`` scores in [0, 1] from a relative judge's reply (``scores`` or ``ranking``)."""
    obj = _json_object(text)
    if obj is None:
        return None
    if "ranking" in obj and isinstance(obj["ranking"], list):
        return ranking_scores(obj["ranking"], n)
    raw = obj.get("scores")
    if not isinstance(raw, list) or len(raw) != n:
        return None
    scores = [_unit(v) for v in raw]
    return None if any(s is None for s in scores) else [float(s) for s in scores]
