"""``TeamEnv``: several agents, each with its own tools and its own view, who share one task.

Decentralized execution: agent k sees only ``env.messages[k]`` (its system prompt, its user
request, its own turns and tool results, and the messages other agents sent it). The agents
take turns in a fixed order (``env.current``; an agent that gave its final answer, a turn with
no tool call, stops taking turns). ``send_message(to, text)`` is every agent's tool: the text
reaches agent ``to`` as a user message ``[from <role>] text`` before its next turn, and it is
the only way anything crosses from one context to another.

The episode ends when every agent has answered (the family's joint verifier grades the
world: ``success`` / ``failure``), when an agent runs out of its ``max_turns`` turns
(``max_turns``), on a harness fault (``harness_error``), or when the rollout calls
``finish`` (``length``). Each agent gets its own ``RewardBreakdown`` (``finish``):

- ``completion``: the joint outcome, identical for every agent;
- ``format``, ``tool_choice``, ``arguments``, ``repeat``: its own turns against its own
  reference calls (``RewardShaper``); ``progress``: the share of its own milestones reached.

The team's breakdown is the layer-wise mean of the agents' (so its total is the mean of their
totals; ``team_breakdown``): the global reward is the shared outcome plus the average process
reward, and agent k's reward is the shared outcome plus its own process reward.
"""

from __future__ import annotations

import json
import random
import traceback
from typing import Any, Protocol

from agentrl.chat.parser import parse_action
from agentrl.envs.core import assistant_message, parse_error_message, result_status
from agentrl.envs.task import TaskInstance
from agentrl.envs.tasks.names import name_key
from agentrl.rewards.shaper import RewardShaper
from agentrl.tools.errors import HARNESS_CODES
from agentrl.tools.guard import ToolGuard
from agentrl.tools.registry import Tool, ToolRegistry, tool
from agentrl.types import TERMINATIONS, Message, RewardBreakdown

StepResult = tuple[list[Message], float, bool, bool, dict[str, Any]]


class TeamFamily(Protocol):
    """What a team task defines (``agentrl.multiagent.meeting_duo`` is one)."""

    name: str
    levels: tuple[int, ...]
    roles: tuple[str, ...]

    #: ``sample``'s ``instance.data`` holds ``system``, ``prompts``, ``expected``: one per role
    def sample(self, rng: random.Random, level: int) -> TaskInstance: ...

    def tools(self, instance: TaskInstance, role: int) -> list[Tool]: ...

    def check(self, instance: TaskInstance) -> bool: ...

    def milestones(self, instance: TaskInstance, role: int, log: list[dict]) -> list[bool]: ...

    def reference_turn(self, instance: TaskInstance, role: int, turn: int) -> str: ...


def team_breakdown(parts: list[RewardBreakdown]) -> RewardBreakdown:
    """The team's breakdown: each layer the mean of the agents' (weights are shared)."""
    layers = sorted({k for p in parts for k in p.layers})
    mean = {k: sum(p.layers.get(k, 0.0) for p in parts) / len(parts) for k in layers}
    return RewardBreakdown(layers=mean, weights=dict(parts[0].weights), per_turn=[])


class TeamEnv:
    """A turn-taking multi-agent environment over a ``TeamFamily`` (module docstring)."""

    def __init__(self, family: TeamFamily, *, max_turns: int = 6,
                 reward_weights: dict[str, float] | None = None,
                 seed: int | None = None) -> None:  # fmt: skip
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        if len(family.roles) < 2:
            raise ValueError(f"team family {family.name!r} needs two roles or more")
        self.family, self.roles, self.max_turns = family, tuple(family.roles), max_turns
        self.shapers = [RewardShaper(reward_weights) for _ in self.roles]
        self._seeds = random.Random(seed)
        probe = family.sample(random.Random(0), family.levels[0])
        self.guards = [
            ToolGuard(ToolRegistry(self._tools(probe, k))) for k in range(len(self.roles))
        ]
        #: each agent's tool schemas (agent k is offered only its own tools)
        self.tool_schemas: list[list[dict]] = [g.registry.schemas() for g in self.guards]
        self.instance: TaskInstance | None = None
        self.done = True

    @property
    def n_agents(self) -> int:
        return len(self.roles)

    # -- episode start -------------------------------------------------------------------
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[list[Message]], dict]:
        """Start an episode; returns each agent's opening messages and the episode info."""
        options = dict(options or {})
        unknown = sorted(set(options) - {"level"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; allowed: ['level']")
        seed = self._seeds.getrandbits(63) if seed is None else seed
        level = options.get("level", self.family.levels[0])
        if level not in self.family.levels:
            raise ValueError(f"level {level!r} is not one of {self.family.name!r}'s levels "
                             f"{list(self.family.levels)}")  # fmt: skip
        inst = self.family.sample(random.Random(seed), level)
        self.instance = inst
        for k, guard in enumerate(self.guards):
            guard.registry = ToolRegistry(self._tools(inst, k))
            self.shapers[k].reset(inst.data["expected"][k])
        self.messages: list[list[Message]] = [
            [{"role": "system", "content": s}, {"role": "user", "content": p}]
            for s, p in zip(inst.data["system"], inst.data["prompts"], strict=True)
        ]
        self.pending: list[list[Message]] = [[] for _ in self.roles]
        self.call_logs: list[list[dict]] = [[] for _ in self.roles]
        self.turns = [0] * self.n_agents
        self.answered = [False] * self.n_agents
        self.current: int | None = 0
        self.done, self.termination = False, None
        self.breakdowns: list[RewardBreakdown] | None = None
        info = {"task_id": inst.task_id, "level": inst.level, "seed": seed, "roles": self.roles}
        return [[dict(m) for m in view] for view in self.messages], info

    def _tools(self, instance: TaskInstance, k: int) -> list[Tool]:
        return [*self.family.tools(instance, k), self._channel(k)]

    def _channel(self, sender: int) -> Tool:
        """``send_message`` of agent ``sender``: queued for the recipient's next turn."""
        roles = self.roles

        @tool
        def send_message(to: str, text: str) -> dict:
            """Send a message to another assistant of the team.

            Args:
                to: The assistant to write to (its role name).
                text: The message.
            """
            keys = [name_key(r) for r in roles]
            if name_key(to) not in keys or keys.index(name_key(to)) == sender:
                others = ", ".join(r for i, r in enumerate(roles) if i != sender)
                raise ValueError(f"Unknown recipient {to!r}; write to: {others}.")
            self.pending[keys.index(name_key(to))].append(
                {"role": "user", "content": f"[from {roles[sender]}] {text}"}
            )
            return {"status": "sent", "to": roles[keys.index(name_key(to))]}

        return send_message

    # -- turns -----------------------------------------------------------------------------
    def observe(self, k: int) -> list[Message]:
        """What reached agent ``k`` since its last turn (its tool results, then messages);
        appended to its view and returned. The rollout calls it right before k's turn."""
        new, self.pending[k] = self.pending[k], []
        self.messages[k].extend(new)
        return [dict(m) for m in new]

    def step(self, action_text: str) -> StepResult:
        """Apply the current agent's turn; ``obs`` are its own tool results (delivered to it,
        with any messages, by ``observe`` before its next turn)."""
        if self.done or self.current is None:
            raise RuntimeError("step() on a finished episode: call reset() first")
        k = self.current
        self.turns[k] += 1
        info: dict[str, Any] = {"agent": k, "turn": self.turns[k], "tool_calls": [],
                                "parse_errors": []}  # fmt: skip
        try:
            return self._step(k, action_text, info)
        except Exception as exc:  # noqa: BLE001 - a harness fault ends the episode, masked
            info["error"] = "".join(traceback.format_exception_only(exc)).strip()
            info["traceback"] = traceback.format_exc()
            return [], *self._end("harness_error", info, terminated=False)

    def _step(self, k: int, action_text: str, info: dict[str, Any]) -> StepResult:
        parsed = parse_action(action_text)
        obs: list[Message] = []
        outcomes: list[bool] = []
        for call in parsed.tool_calls:
            result = self.guards[k].call(call)
            ok, code = result_status(result)
            outcomes.append(ok)
            record = {"name": call.name, "arguments": call.arguments, "ok": ok,
                      "error_code": code, "content": result.content}  # fmt: skip
            info["tool_calls"].append(record)
            self.call_logs[k].append({"turn": self.turns[k], **record})
            obs.append({"role": "tool", "name": call.name, "content": result.content})
        for err in parsed.errors:
            info["parse_errors"].append(err.code)
            obs.append(parse_error_message(err.code, err.message))
        self.messages[k].append(assistant_message(parsed, action_text))
        self.pending[k] = obs + self.pending[k]
        self.shapers[k].add_turn(parsed, outcomes)
        self.answered[k] = parsed.is_final_answer
        if any(r["error_code"] in HARNESS_CODES for r in info["tool_calls"]):
            info["error"] = next(r["content"] for r in info["tool_calls"]
                                 if r["error_code"] in HARNESS_CODES)  # fmt: skip
            return obs, *self._end("harness_error", info, terminated=False)
        if all(self.answered):
            success = bool(self.family.check(self.instance))
            return obs, *self._end("success" if success else "failure", info, terminated=True)
        if not self.answered[k] and self.turns[k] >= self.max_turns:
            return obs, *self._end("max_turns", info, terminated=False)
        self.current = self._next(k)
        return obs, 0.0, False, False, info

    def _next(self, k: int) -> int:
        """The next agent after ``k`` that has not answered yet."""
        order = [(k + d) % self.n_agents for d in range(1, self.n_agents + 1)]
        return next(j for j in order if not self.answered[j])

    # -- episode end -------------------------------------------------------------------------
    def _end(self, termination: str, info: dict[str, Any], *,
             terminated: bool) -> tuple[float, bool, bool, dict[str, Any]]:  # fmt: skip
        parts = self.finish(termination)
        team = team_breakdown(parts)
        info.update(termination=termination, reward=team, agent_rewards=parts,
                    success=termination == "success")  # fmt: skip
        return team.total, terminated, not terminated, info

    def finish(self, reason: str) -> list[RewardBreakdown]:
        """End the episode with ``reason`` and score each agent (idempotent); module docs."""
        if reason not in TERMINATIONS:
            raise ValueError(f"unknown termination {reason!r}; allowed: {', '.join(TERMINATIONS)}")
        if self.breakdowns is not None:
            return self.breakdowns
        self.done, self.current, self.termination = True, None, reason
        parts = []
        for k, shaper in enumerate(self.shapers):
            b = shaper.breakdown(success=reason == "success")
            steps = self.family.milestones(self.instance, k, self.call_logs[k])
            b.layers["progress"] = sum(steps) / len(steps)
            b.weights["progress"] = shaper.process_weights["progress"]
            parts.append(b)
        self.breakdowns = parts
        return parts

    # -- the reference solver ------------------------------------------------------------------
    def reference_action(self) -> str:
        """The reference solver's action for the current agent (the family's scripted turn)."""
        if self.instance is None or self.current is None:
            raise RuntimeError("reference_action() outside a running episode")
        return self.family.reference_turn(self.instance, self.current, self.turns[self.current])

    def play_reference(self, seed: int, level: int) -> dict[str, Any]:
        """Play one episode with the reference solver; returns the final step's info."""
        self.reset(seed=seed, options={"level": level})
        for _ in range(self.n_agents * (self.max_turns + 1)):
            self.observe(self.current)
            _, _, terminated, truncated, info = self.step(self.reference_action())
            if terminated or truncated:
                return info
        raise AssertionError(f"team episode did not end within max_turns={self.max_turns}")

    def reference_demos(self, seed: int, level: int) -> list[tuple[list[Message], list[dict]]]:
        """Each agent's side of a reference episode as an SFT demonstration (messages, tools)."""
        info = self.play_reference(seed, level)
        if not info["success"]:
            raise AssertionError(f"{self.family.name}: the reference failed seed {seed} "
                                 f"level {level}: {info['termination']}")  # fmt: skip
        return [([dict(m) for m in view], self.tool_schemas[k])
                for k, view in enumerate(self.messages)]  # fmt: skip


def describe(env: TeamEnv) -> str:
    """A one-line summary of a team env's roles and their tools (for logs and examples)."""
    return json.dumps({r: [s["function"]["name"] for s in env.tool_schemas[k]]
                       for k, r in enumerate(env.roles)})  # fmt: skip
