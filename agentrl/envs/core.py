"""The environment API (gymnasium-style, chat-shaped) and ``ToolTaskEnv``, the generic env.

``reset(seed, options) -> (messages, info)`` gives the opening chat; ``step(action_text)``
takes the assistant's raw text and returns ``(obs, reward, terminated, truncated, info)``
where ``obs`` are the new ``tool`` messages. The env keeps the dialogue in ``env.messages``.
A turn with no tool-call attempt is the final answer: the task's verifier grades it.
Every tool call goes through ``env.guard`` (DESIGN contract 2), every episode ends with a
reason (contract 3) and a ``RewardBreakdown`` (contract 4).
"""

from __future__ import annotations

import copy
import json
import random
import traceback
from typing import Any, Protocol, runtime_checkable

from agentrl.chat.parser import parse_action
from agentrl.envs.reference import reference_action as reference_solver
from agentrl.envs.snapshot import EnvSnapshot, restore_episode, take_snapshot
from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.rewards.shaper import RewardShaper
from agentrl.tools.errors import HARNESS_CODES
from agentrl.tools.guard import ToolGuard
from agentrl.tools.registry import ToolRegistry
from agentrl.types import TERMINATIONS, Message, ParsedAction, RewardBreakdown, ToolResult

StepResult = tuple[list[Message], float, bool, bool, dict[str, Any]]
RESET_OPTIONS = ("level", "instance")


@runtime_checkable
class Env(Protocol):
    """What the rollout relies on; ``check_env`` verifies an implementation."""

    tool_schemas: list[dict[str, Any]]
    max_turns: int
    messages: list[Message]
    guard: ToolGuard

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]: ...

    def step(self, action_text: str) -> StepResult: ...

    def finish(self, reason: str) -> RewardBreakdown: ...

    def reference_action(self) -> str: ...


def result_status(result: ToolResult) -> tuple[bool, str | None]:
    """(ok, error_code) of a result; a tool that returns ``{"error": code, ...}`` failed too."""
    if not result.ok:
        return False, result.error_code
    try:
        value = json.loads(result.content)
    except (json.JSONDecodeError, RecursionError):
        return True, None
    if isinstance(value, dict) and "error" in value:
        return False, str(value["error"])
    return True, None


def seeded_order(items: list[Any], seed: int) -> list[Any]:
    """``items`` permuted by ``seed`` alone: the same episode seed, the same order."""
    out = list(items)
    random.Random(f"tool-order|{seed}").shuffle(out)
    return out


def assistant_message(parsed: ParsedAction, raw_text: str) -> Message:
    """The assistant message stored in history: raw text if anything failed to parse."""
    if parsed.errors:
        return {"role": "assistant", "content": raw_text}
    message: Message = {"role": "assistant", "content": parsed.text}
    if parsed.tool_calls:
        message["tool_calls"] = [c.to_message_call() for c in parsed.tool_calls]
    return message


def parse_error_message(code: str, message: str) -> Message:
    """The ``tool`` observation that tells the model its call could not be read."""
    content = json.dumps({"error": "parse_error", "code": code, "message": message})
    return {"role": "tool", "content": content}


class ToolTaskEnv:
    """A multi-turn tool-use environment over any ``TaskFamily``."""

    def __init__(
        self,
        family: TaskFamily,
        *,
        max_turns: int = 6,
        reward_weights: dict[str, float] | None = None,
        seed: int | None = None,
        system_prompt: str | None = None,
        shuffle_tools: bool = False,
    ) -> None:
        """``system_prompt`` replaces the family's system message (None keeps the family's);
        ``shuffle_tools`` offers the tool schemas in an order drawn from each episode's seed,
        so that a policy cannot learn the list's order in place of the request."""
        if not isinstance(family, TaskFamily):
            raise TypeError(f"ToolTaskEnv needs a TaskFamily, got {type(family).__name__}")
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        if not family.levels:
            raise ValueError(f"task family {family.name!r} has no levels")
        if system_prompt is not None and (
            not isinstance(system_prompt, str) or not system_prompt.strip()
        ):
            raise ValueError(f"system_prompt must be a non-empty string, got {system_prompt!r}")
        self.family = family
        self.system_prompt = family.system_prompt if system_prompt is None else system_prompt
        self.max_turns = max_turns
        self.shaper = RewardShaper(reward_weights)
        self._seeds = random.Random(seed)
        probe = family.sample(random.Random(0), family.levels[0])
        registry = ToolRegistry(family.tools(probe))
        #: the family's schemas in their own order; ``tool_schemas`` is this episode's order
        self.family_schemas: list[dict[str, Any]] = registry.schemas()
        self.tool_schemas: list[dict[str, Any]] = self.family_schemas
        self.shuffle_tools = bool(shuffle_tools)
        self.guard = ToolGuard(registry)
        self.concurrent_steps = False
        self.messages: list[Message] = []
        self.instance: TaskInstance | None = None
        self.call_log: list[dict[str, Any]] = []
        self.turn = 0
        self.done = True
        self.termination: str | None = None
        self.breakdown: RewardBreakdown | None = None
        #: (seed, the instance before its tools were built, action texts): see ``snapshot``
        self.episode_recipe: tuple[int, TaskInstance, list[str]] | None = None

    # -- episode start -------------------------------------------------------------------
    def draw_instance(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[int, TaskInstance]:
        """Check ``reset``'s options; ``(seed, instance)``: the given one or a sampled one.

        The one place a level is checked: ``family.sample`` only ever sees the family's levels.
        """
        options = dict(options or {})
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; allowed: {list(RESET_OPTIONS)}")
        if seed is None:
            seed = self._seeds.getrandbits(63)
        instance = options.get("instance")
        if instance is None:
            level = options.get("level", self.family.levels[0])
            if level not in self.family.levels:
                raise ValueError(
                    f"level {level!r} is not one of {self.family.name!r}'s levels "
                    f"{list(self.family.levels)}"
                )
            instance = self.family.sample(random.Random(seed), level)
        return seed, instance

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode; ``options``: ``level`` (default the easiest) or ``instance``."""
        seed, instance = self.draw_instance(seed, options)
        self.episode_recipe = (seed, copy.deepcopy(instance), [])
        registry = ToolRegistry(self.family.tools(instance))
        if registry.schemas() != self.family_schemas:
            raise ValueError(f"{self.family.name!r}: tools() must give the same schemas always")
        self.tool_schemas = (
            seeded_order(self.family_schemas, seed) if self.shuffle_tools else self.family_schemas
        )
        self.guard.registry = registry
        #: the rollout may step this env in a thread alongside others (worker-mode tools only)
        self.concurrent_steps = any(self.guard.policy(t).mode == "worker" for t in registry)
        self.instance = instance
        self.messages = []
        if self.system_prompt:
            self.messages.append({"role": "system", "content": self.system_prompt})
        self.messages.append({"role": "user", "content": instance.prompt})
        self.call_log, self.turn, self.done = [], 0, False
        self.termination, self.breakdown = None, None
        self.shaper.reset(instance.expected_calls)
        info = {"task_id": instance.task_id, "level": instance.level, "seed": seed}
        return [dict(m) for m in self.messages], info

    # -- one assistant turn ------------------------------------------------------------------
    def step(self, action_text: str) -> StepResult:
        """Apply one assistant turn (raw text, no end token); see the module docstring."""
        if self.done or self.instance is None:
            raise RuntimeError("step() on a finished episode: call reset() first")
        if not isinstance(action_text, str):
            raise TypeError(f"step() takes the assistant's text, got {type(action_text).__name__}")
        self.turn += 1
        self.episode_recipe[2].append(action_text)
        info: dict[str, Any] = {"turn": self.turn, "tool_calls": [], "parse_errors": []}
        try:
            return self._step(action_text, info)
        except Exception as exc:  # noqa: BLE001 - a harness fault must end the episode, masked
            info["error"] = "".join(traceback.format_exception_only(exc)).strip()
            info["traceback"] = traceback.format_exc()
            return [], *self._end("harness_error", info, terminated=False)

    def _step(self, action_text: str, info: dict[str, Any]) -> StepResult:
        parsed = parse_action(action_text)
        obs: list[Message] = []
        outcomes: list[bool] = []
        for call in parsed.tool_calls:
            result = self.guard.call(call)
            ok, code = result_status(result)
            outcomes.append(ok)
            record = {
                "name": call.name,
                "arguments": call.arguments,
                "ok": ok,
                "error_code": code,
                "content": result.content,
                "truncated_output": result.truncated_output,
                "coerced": list(result.coerced),
            }
            info["tool_calls"].append(record)
            self.call_log.append({"turn": self.turn, **record})
            obs.append({"role": "tool", "name": call.name, "content": result.content})
        for err in parsed.errors:
            self.guard.record_parse_error()
            info["parse_errors"].append(err.code)
            obs.append(parse_error_message(err.code, err.message))
        self.messages.append(assistant_message(parsed, action_text))
        self.messages.extend(obs)
        info["turn_reward"] = self.shaper.add_turn(parsed, outcomes)
        if parsed.is_final_answer:
            success = bool(self.family.check_answer(self.instance, parsed.text))
            return obs, *self._end("success" if success else "failure", info, terminated=True)
        faults = [r["content"] for r in info["tool_calls"] if r["error_code"] in HARNESS_CODES]
        if faults:  # a worker died / the sandbox failed: the harness's fault, not the model's
            info["error"] = faults[0]
            return obs, *self._end("harness_error", info, terminated=False)
        codes = {r["error_code"] for r in info["tool_calls"]}
        if "timeout" in codes and self.guard.settings.stop_on_timeout:
            return obs, *self._end("tool_timeout", info, terminated=False)
        if self.turn >= self.max_turns:
            return obs, *self._end("max_turns", info, terminated=False)
        return obs, 0.0, False, False, info

    # -- episode end -------------------------------------------------------------------------
    def _end(
        self, termination: str, info: dict[str, Any], *, terminated: bool
    ) -> tuple[float, bool, bool, dict[str, Any]]:
        breakdown = self.finish(termination)
        info.update(termination=termination, reward=breakdown, success=termination == "success")
        return breakdown.total, terminated, not terminated, info

    def finish(self, reason: str) -> RewardBreakdown:
        """End the episode with ``reason`` (e.g. the rollout's ``"length"``) and score it.

        Idempotent: on an episode that already ended, returns its breakdown unchanged.
        """
        if reason not in TERMINATIONS:
            raise ValueError(f"unknown termination {reason!r}; allowed: {', '.join(TERMINATIONS)}")
        if self.done and self.breakdown is not None:
            return self.breakdown
        self.done = True
        self.termination = reason
        self.breakdown = self.shaper.breakdown(success=reason == "success")
        return self.breakdown

    # -- branching ---------------------------------------------------------------------------
    def snapshot(self) -> EnvSnapshot:
        """The running episode's state (``agentrl.envs.snapshot``: a replayable recipe)."""
        return take_snapshot(self)

    def restore(self, snap: EnvSnapshot) -> list[Message]:
        """Rebuild ``snap``'s state here (reset + replay, checked); returns the dialogue."""
        return restore_episode(self, snap)

    def reference_action(self) -> str:
        """The reference solver's next action text for the current state."""
        if self.instance is None:
            raise RuntimeError("reference_action() before reset()")
        return reference_solver(self.family, self.instance, self.call_log)
