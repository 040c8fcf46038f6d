"""RewardShaper: collect per-turn layer scores during an episode, explain the reward at the end.

Episode layers (unweighted, in ``RewardBreakdown.layers``):

- ``format``: mean format score over assistant turns; 0.0 if there was no turn, and 0.0 when
  the task expected calls and none was made (otherwise a policy that cannot yet call a tool
  well learns to skip tools: a plain answer always parses).
- ``tool_choice``: mean over the turns that made calls. With no call at all it is 0.0 when
  the task expected calls (answering without looking must not earn it) and 1.0 when it
  expected none.
- ``arguments``: coverage of the expected calls (``layers.argument_coverage``).
- ``completion``: 1.0 if the verifier accepted the answer.
- ``repeat``: the number of repeated calls (a count; its weight is negative).

``per_turn[i]`` holds turn ``i``'s ``format`` and ``repeat``, plus ``tool_choice`` and
``arguments`` (fraction of that turn's calls that equal an expected call) when it made calls.

The weights of the task families' process layers (``progress``, ``reask``) come in the same
mapping; they sit in ``process_weights`` and join a breakdown only where a family scores them
(``ShapedTaskEnv``), so a breakdown's ``weights`` hold only layers it has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentrl.rewards.layers import (
    LAYERS,
    PROCESS_LAYERS,
    argument_coverage,
    completion_score,
    count_repeats,
    format_score,
    mean_or,
    resolve_weights,
    tool_choice_score,
    turn_argument_score,
)
from agentrl.types import ParsedAction, RewardBreakdown, ToolCall


class RewardShaper:
    """Score one episode at a time: ``reset`` → ``add_turn`` per turn → ``breakdown``."""

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        resolved = resolve_weights(weights)
        self.weights = {k: resolved[k] for k in LAYERS}
        self.process_weights = {k: resolved[k] for k in PROCESS_LAYERS}
        self.reset(())

    def reset(self, expected_calls: Sequence[ToolCall]) -> None:
        """Start an episode whose task is solved by ``expected_calls``."""
        self.expected = list(expected_calls)
        self.expected_names = {c.name for c in self.expected}
        self.history: list[tuple[ToolCall, bool]] = []
        self.per_turn: list[dict[str, float]] = []

    def add_turn(self, parsed: ParsedAction, outcomes: Sequence[bool]) -> dict[str, float]:
        """Score one assistant turn; ``outcomes[j]`` says if ``parsed.tool_calls[j]`` succeeded."""
        if len(outcomes) != len(parsed.tool_calls):
            raise ValueError(
                f"add_turn: {len(outcomes)} outcomes for {len(parsed.tool_calls)} tool calls"
            )
        before = count_repeats(self.history)
        self.history.extend(zip(parsed.tool_calls, outcomes, strict=True))
        scores = {
            "format": format_score(parsed),
            "repeat": float(count_repeats(self.history) - before),
        }
        choice = tool_choice_score(parsed.tool_calls, self.expected_names)
        if choice is not None:
            scores["tool_choice"] = choice
            scores["arguments"] = turn_argument_score(parsed.tool_calls, self.expected)
        self.per_turn.append(scores)
        return scores

    def episode_layers(self, success: bool) -> dict[str, float]:
        """The unweighted episode scores (see the module docstring)."""
        choices = [t["tool_choice"] for t in self.per_turn if "tool_choice" in t]
        no_call_choice = 0.0 if self.expected else 1.0
        skipped_tools = bool(self.expected) and not self.history
        fmt = 0.0 if skipped_tools else mean_or([t["format"] for t in self.per_turn], 0.0)
        return {
            "format": fmt,
            "tool_choice": mean_or(choices, no_call_choice),
            "arguments": argument_coverage((c for c, _ in self.history), self.expected),
            "completion": completion_score(success),
            "repeat": float(count_repeats(self.history)),
        }

    def breakdown(self, success: bool) -> RewardBreakdown:
        """The episode's ``RewardBreakdown``; ``total = sum(weights[k] * layers[k])``."""
        return RewardBreakdown(
            layers=self.episode_layers(success),
            weights=dict(self.weights),
            per_turn=[dict(t) for t in self.per_turn],
        )
