"""Plan-and-execute (seed 000 §2.1, the ToRL dual loop; seed 003 §4.2) as an env wrapper.

``PlanExecute(env)`` asks for a plan before any tool call (an instruction joins the system
message). A turn with no tool call that reads as a plan (``Plan:`` and numbered lines, or
numbered lines alone) is the planner's turn: the plan is recorded, the env answers "Plan noted"
and the executor turns follow (the wrapped env's own loop, ``max_turns`` unchanged). After a
failed call the policy may re-plan once (``max_replans``); any other turn goes to the wrapped
env as it is (a turn that skips the plan is simply executed).

Credit: the plan is scored against the sub-tasks the reference solver knows
(``instance.expected_calls``): ``decomposition_accuracy`` is the share of them the plan names
in order (the tool, and each argument value the user's request gives: a city, a person; not
values that only tool results reveal). It joins the episode's breakdown as the
``plan`` layer (weight ``reward.plan``), so the planner's tokens are paid for the episode's
shaped reward plus their decomposition; the executor turns keep their per-turn process scores
(``per_turn``: format, tool choice, arguments, repeats; one entry per assistant turn, the
planner's included, so ``per_turn[i]`` is turn ``i`` in plots and the viewer).

``plan_text(expected_calls)`` is the reference planner: warm-start demonstrations played
through the wrapper open with it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentrl.chat.parser import parse_action
from agentrl.envs.core import assistant_message
from agentrl.envs.snapshot import EnvSnapshot, dialogue_digest, restore_episode
from agentrl.types import Message, RewardBreakdown, ToolCall

PLAN_INSTRUCTION = (
    "First write a plan: 'Plan:' and one numbered line per tool call you will make, e.g. "
    "'1. get_weather(city=Paris)'. Then make the calls and answer."
)
PLAN_NOTED = "Plan noted ({n} step{s}). Carry it out."
_STEP = re.compile(r"^\s*(\d+)[.)]\s+(.+?)\s*$")


def parse_plan(text: str) -> list[str] | None:
    """The numbered steps of a plan turn, or None when ``text`` is not a plan.

    >>> parse_plan("Plan:\\n1. get_weather(city=Paris)\\n2. answer")
    ['get_weather(city=Paris)', 'answer']
    """
    steps = [m.group(2) for line in text.splitlines() if (m := _STEP.match(line))]
    return steps or None


def _words(value: Any) -> list[str] | None:
    """A value as the words a plan line would show: a scalar's text, a list's items; None for
    anything else (a mapping)."""
    if isinstance(value, list | tuple):
        items = [_words(v) for v in value]
        return None if any(i is None for i in items) else [w for i in items for w in i]
    if isinstance(value, dict):
        return None
    return [value if isinstance(value, str) else json.dumps(value)]


def known_arguments(call: ToolCall, prompt: str) -> dict[str, list[str]]:
    """The arguments of ``call`` a planner can know before any tool result: those whose
    words all appear in the user's ``prompt`` (a city, a person, a date), as words."""
    low = prompt.casefold()
    known = {}
    for key, value in call.arguments.items():
        words = _words(value)
        if words and all("\n" not in w and w.casefold() in low for w in words):
            known[key] = words
    return known


def _shown(value: Any, words: list[str]) -> str:
    return "[" + ", ".join(words) + "]" if isinstance(value, list | tuple) else words[0]


def plan_text(expected_calls: list[ToolCall], prompt: str) -> str:
    """The reference plan: one numbered line per expected call, with the arguments known from
    the prompt (the others come from tool results later), then the answer."""
    lines = []
    for i, call in enumerate(expected_calls, 1):
        shown = [
            f"{k}={_shown(call.arguments[k], w)}" for k, w in known_arguments(call, prompt).items()
        ]
        lines.append(f"{i}. {call.name}({', '.join(shown)})")
    lines.append(f"{len(expected_calls) + 1}. answer")
    return "Plan:\n" + "\n".join(lines)


def _names_call(step: str, call: ToolCall, prompt: str) -> bool:
    """Does a plan step name ``call``: its tool and every argument word known from the
    prompt (case-insensitive)?"""
    low = step.casefold()
    words = [w for ws in known_arguments(call, prompt).values() for w in ws]
    return call.name.casefold() in low and all(w.casefold() in low for w in words)


def decomposition_accuracy(steps: list[str] | None, expected: list[ToolCall], prompt: str) -> float:
    """Share of ``expected`` calls a plan names in order (greedy matching; a call is named by
    its tool and the argument values the ``prompt`` gives); 1.0 when nothing was expected,
    0.0 without a plan."""
    if not expected:
        return 1.0
    if not steps:
        return 0.0
    found, at = 0, 0
    for call in expected:
        for j in range(at, len(steps)):
            if _names_call(steps[j], call, prompt):
                found, at = found + 1, j + 1
                break
    return found / len(expected)


class PlanExecute:
    """Wrap an env so that an episode opens with a planner turn (module docstring)."""

    def __init__(self, env: Any, max_replans: int = 1) -> None:
        if max_replans < 0:
            raise ValueError(f"max_replans must be >= 0, got {max_replans}")
        self.env, self.max_replans = env, max_replans
        self.plans: list[list[str]] = []
        self.actions: list[str] = []
        self.planning = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    @property
    def max_turns(self) -> int:
        """The most assistant turns an episode can take: the executor's, the plan, re-plans."""
        return self.env.max_turns + 1 + self.max_replans

    @property
    def plan(self) -> list[str] | None:
        """The first plan of the episode (what decomposition accuracy scores)."""
        return self.plans[0] if self.plans else None

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        messages, info = self.env.reset(seed=seed, options=options)
        for dialogue in (self.env.messages, messages):
            if dialogue and dialogue[0]["role"] == "system":
                own = dialogue[0]["content"]
                dialogue[0] = {**dialogue[0], "content": f"{own}\n{PLAN_INSTRUCTION}"}
            else:
                dialogue.insert(0, {"role": "system", "content": PLAN_INSTRUCTION})
        self.plans, self.actions, self.planning = [], [], True
        return messages, info

    def step(self, action_text: str):
        """A plan turn is recorded here; every other turn is the wrapped env's."""
        self.actions.append(action_text)
        parsed = parse_action(action_text)
        steps = None if parsed.tool_calls or parsed.errors else parse_plan(action_text)
        if self.planning and steps is not None:
            self.planning = False
            self.plans.append(steps)
            note: Message = {"role": "user", "content": PLAN_NOTED.format(
                n=len(steps), s="" if len(steps) == 1 else "s")}  # fmt: skip
            self.env.messages.extend([assistant_message(parsed, action_text), note])
            # scored as a turn (format, no calls), so per_turn[i] is assistant turn i
            turn_reward = self.env.shaper.add_turn(parsed, [])
            info = {"turn": self._turns(), "tool_calls": [], "parse_errors": [], "plan": steps,
                    "turn_reward": turn_reward}  # fmt: skip
            return [note], 0.0, False, False, info
        self.planning = False
        obs, reward, terminated, truncated, info = self.env.step(action_text)
        info["turn"] = self._turns()
        failed = any(not c["ok"] for c in info.get("tool_calls", []))
        if failed and len(self.plans) <= self.max_replans and self.plans:
            self.planning = True  # the next turn may re-plan
        if terminated or truncated:
            info["reward"] = self.finish(info["termination"])
            reward = info["reward"].total
        return obs, reward, terminated, truncated, info

    def _turns(self) -> int:
        """Assistant turns so far, the planner's included (the rollout's turn numbering)."""
        return self.env.turn + len(self.plans)

    def finish(self, reason: str) -> RewardBreakdown:
        """The wrapped env's breakdown plus the ``plan`` layer (decomposition accuracy)."""
        breakdown = self.env.finish(reason)
        if "plan" not in breakdown.layers:
            expected = list(self.env.instance.expected_calls) if self.env.instance else []
            prompt = self.env.instance.prompt if self.env.instance else ""
            breakdown.layers["plan"] = decomposition_accuracy(self.plan, expected, prompt)
            breakdown.weights["plan"] = self.env.shaper.process_weights["plan"]
        return breakdown

    def reference_action(self) -> str:
        """The reference plan first, then the wrapped env's reference solver."""
        if self.planning and not self.plans:
            instance = self.env.instance
            return plan_text(list(instance.expected_calls), instance.prompt)
        return self.env.reference_action()

    def snapshot(self) -> EnvSnapshot:
        """The episode's recipe with every turn, the planner's included."""
        base = self.env.snapshot()
        return EnvSnapshot(base.seed, base.instance, tuple(self.actions),
                           dialogue_digest(self.env.messages))  # fmt: skip

    def restore(self, snap: EnvSnapshot) -> list[Message]:
        """Rebuild ``snap``'s state by replaying every turn through this wrapper."""
        return restore_episode(self, snap)
