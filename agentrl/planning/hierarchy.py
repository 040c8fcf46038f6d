"""Hierarchical episodes (seed 000 §5): a manager picks subgoals, a worker carries each out.

``Hierarchy(env, cfg)`` plays one episode of ``env`` at the text level, in contexts (the
token-level rollout is ``agentrl.planning.hier_rollout``); both roles are the same policy with
role prompts:

- the **manager** context: the task's system prompt plus ``MANAGER_PROMPT``, the user's
  request, no tools. A reply ``Subgoal: <one line>`` hands a subgoal to a worker; any other
  reply is the final answer, graded by the env as a ReAct answer is. A manager reply that
  tries a tool call is told to hand calls to a worker (it counts as a manager turn).
- a **worker** context per subgoal: the system prompt plus ``WORKER_PROMPT``, the env's tools,
  and the user message ``Subgoal: <line>`` (with ``pass_results``, the earlier results under
  ``Known:``). Its tool-call turns are the env's own steps (ToolGuard, per-turn scores, the
  env's ``max_turns``); a reply without a call closes the subgoal (``subgoal done: <result>``,
  the prefix optional) and its result comes back to the manager as ``Result: <result>``. After
  ``worker_turns`` turns the subgoal comes back unfinished, with the last tool output.

``act(text)`` takes the current context's reply and says what happens next (an ``Outcome``).
Every closed worker context is recorded in ``workers`` with its subgoal, type and reward
(``agentrl.planning.subgoals``). ``reference_action()`` is the reference solver in this format
(the warm start's demonstrations): one subgoal per group of expected calls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.parser import parse_action
from agentrl.config.hierarchy import HierarchyConfig
from agentrl.envs.core import assistant_message
from agentrl.envs.reference import format_call, successful_results
from agentrl.planning.subgoals import (
    subgoal_groups,
    subgoal_reward,
    subgoal_target,
    subgoal_text,
    subgoal_type,
)
from agentrl.rewards.layers import call_key
from agentrl.types import Message, RewardBreakdown, ToolCall

MANAGER_PROMPT = (
    "You are the manager. Hand the task out one subgoal at a time: reply 'Subgoal: ' and one "
    "line, e.g. 'Subgoal: get_weather(city=Paris)'; a worker carries it out with the tools and "
    "its result comes back. Then reply with the final answer."
)
WORKER_PROMPT = (
    "You are a worker. Carry out the subgoal with the tools, then reply 'subgoal done: ' and "
    "the result."
)
NO_TOOLS = "The manager does not call tools: reply 'Subgoal: ...' to hand the call to a worker."
DONE_PREFIX = "subgoal done:"
_SUBGOAL = re.compile(r"^\s*subgoal\s*:\s*(.+?)\s*$", re.IGNORECASE)


def parse_subgoal(text: str) -> str | None:
    """The subgoal of a manager reply (its first line ``Subgoal: <line>``), else None.

    >>> parse_subgoal("Subgoal: get_weather(city=Paris)")
    'get_weather(city=Paris)'
    """
    lines = text.strip().splitlines()
    match = _SUBGOAL.match(lines[0]) if lines else None
    return match.group(1) if match else None


def worker_result(text: str) -> str:
    """A worker's closing reply without its ``subgoal done:`` prefix."""
    body = text.strip()
    return body[len(DONE_PREFIX) :].strip() if body.casefold().startswith(DONE_PREFIX) else body


@dataclass
class Context:
    """One context of the episode: its role, messages (what its tokens render) and tools."""

    role: str  # "manager" | "worker"
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    subgoal: str | None = None


@dataclass
class Outcome:
    """What follows a reply: ``continue`` (``new`` messages appended to ``context``), ``open``
    (a new worker ``context``), ``resume`` (the manager ``context`` with ``new`` messages) or
    ``end`` (``termination``, ``reward``)."""

    kind: str
    context: Context | None = None
    new: int = 0
    termination: str | None = None
    reward: RewardBreakdown | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)


def _role_system(messages: list[Message], role_prompt: str) -> Message:
    own = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    return {"role": "system", "content": f"{own}\n{role_prompt}" if own else role_prompt}


class Hierarchy:
    """One hierarchical episode of ``env`` (module docstring)."""

    def __init__(self, env: Any, cfg: HierarchyConfig | None = None) -> None:
        self.env, self.cfg = env, cfg or HierarchyConfig()

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start the episode: ``(manager context, reset info)``."""
        messages, info = self.env.reset(seed=seed, options=options)
        user = next(m for m in messages if m["role"] == "user")
        self.system = messages
        self.manager = Context("manager", [_role_system(messages, MANAGER_PROMPT), dict(user)])
        self.worker: Context | None = None
        self.workers: list[dict[str, Any]] = []  # closed worker contexts, in order
        self.results: list[str] = []
        self.manager_turns = self.worker_turn = 0
        self.worker_start = 0  # env turns before the current worker
        instance = self.env.instance
        self.groups = subgoal_groups(list(instance.expected_calls), instance.prompt)
        return self.manager, info

    @property
    def current(self) -> Context:
        return self.worker if self.worker is not None else self.manager

    def act(self, text: str) -> Outcome:
        """Apply the current context's reply (the raw text the policy wrote)."""
        parsed = parse_action(text)
        ctx = self.current
        ctx.messages.append(assistant_message(parsed, text))
        if self.worker is not None:
            return self._worker_turn(text, parsed)
        self.manager_turns += 1
        subgoal = None if parsed.tool_calls or parsed.errors else parse_subgoal(text)
        if parsed.tool_calls or parsed.errors:
            if self.manager_turns > self.cfg.max_subgoals:
                return self._end("max_turns")
            ctx.messages.append({"role": "user", "content": NO_TOOLS})
            return Outcome("continue", ctx, 1)
        if subgoal is None:  # the final answer: the env grades it
            _, _, terminated, truncated, info = self.env.step(text)
            return Outcome("end", termination=info["termination"], reward=info["reward"])
        if len(self.workers) >= self.cfg.max_subgoals:
            return self._end("max_turns")
        return self._open(subgoal)

    def _open(self, subgoal: str) -> Outcome:
        ask = f"Subgoal: {subgoal}"
        if self.cfg.pass_results and self.results:
            ask += "\nKnown: " + "; ".join(self.results)
        user = {"role": "user", "content": ask}
        self.worker = Context("worker", [_role_system(self.system, WORKER_PROMPT), user],
                              self.env.tool_schemas, subgoal)  # fmt: skip
        self.worker_turn, self.worker_start = 0, self.env.turn
        done = [i for i, g in enumerate(self.groups) if self._done(g) is not None]
        self.target = subgoal_target(subgoal, self.groups, self.env.instance.prompt, done)
        return Outcome("open", self.worker)

    def _worker_turn(self, text: str, parsed) -> Outcome:
        self.worker_turn += 1
        if parsed.is_final_answer:
            return self._close(worker_result(text), finished=True)
        obs, _, terminated, truncated, info = self.env.step(text)
        calls, errors = info.get("tool_calls", []), info.get("parse_errors", [])
        if terminated or truncated:
            self._record(finished=False)
            return Outcome("end", termination=info["termination"], reward=info["reward"],
                           tool_calls=calls, parse_errors=errors)  # fmt: skip
        if self.worker_turn >= self.cfg.worker_turns:
            last = obs[-1]["content"] if obs else ""
            out = self._close(f"not finished after {self.worker_turn} turns; last: {last}",
                              finished=False)  # fmt: skip
        else:
            self.worker.messages.extend(obs)
            out = Outcome("continue", self.worker, len(obs))
        out.tool_calls, out.parse_errors = calls, errors
        return out

    def _record(self, finished: bool) -> None:
        """Close the current worker: its subgoal, type, calls and reward join ``workers``."""
        w, env = self.worker, self.env
        turns = range(self.worker_start, env.turn)  # its env turns, 0-based
        calls = [c for c in env.call_log if c["turn"] - 1 in turns]
        per_turn = [env.shaper.per_turn[t] for t in turns if t < len(env.shaper.per_turn)]
        target = self.target
        reward = subgoal_reward(None if target is None else self.groups[target], calls,
                                per_turn, finished)  # fmt: skip
        self.workers.append({"role": "worker", "subgoal": w.subgoal, "target": target,
                             "type": subgoal_type(target, self.groups), "turns": self.worker_turn,
                             "finished": finished, "reward": reward.total,
                             "layers": dict(reward.layers), "context": w})  # fmt: skip
        self.worker = None

    def _close(self, result: str, finished: bool) -> Outcome:
        self._record(finished)
        self.results.append(result)
        self.manager.messages.append({"role": "user", "content": f"Result: {result}"})
        return Outcome("resume", self.manager, 1)

    def _end(self, reason: str) -> Outcome:
        if self.worker is not None:
            self._record(finished=False)
        return Outcome("end", termination=reason, reward=self.env.finish(reason))

    def finish(self, reason: str) -> RewardBreakdown:
        """End the episode from outside (the rollout's ``length``): the env's breakdown."""
        if self.worker is not None:
            self._record(finished=False)
        return self.env.finish(reason)

    # -- the reference solver in this format -----------------------------------------------
    def _done(self, group: list[ToolCall]) -> list[str] | None:
        """The result texts of ``group``'s calls if every one succeeded, else None."""
        found = {}
        for entry in self.env.call_log:
            key = call_key(ToolCall(entry["name"], entry["arguments"]))
            if entry["ok"] and key not in found:
                found[key] = entry["content"]
        texts = [found.get(call_key(c)) for c in group]
        return None if any(t is None for t in texts) else texts

    def reference_action(self) -> str:
        """The next reply of the reference: subgoal per group, calls, ``subgoal done``, answer."""
        instance = self.env.instance
        if self.worker is None:
            todo = next((g for g in self.groups if self._done(g) is None), None)
            if todo is not None:
                return f"Subgoal: {subgoal_text(todo, instance.prompt)}"
            results = successful_results(instance.expected_calls, self.env.call_log)
            return self.env.family.reference_answer(instance, results)
        group = self.groups[self.target]
        texts = self._done(group)
        if texts is None:
            done = successful_results(group, self.env.call_log)
            return format_call(next(c for i, c in enumerate(group) if i not in done))
        return f"{DONE_PREFIX} " + " ".join(_compact(t) for t in texts)


def _compact(content: str) -> str:
    """A tool result's JSON as one line (unchanged if it is not JSON)."""
    try:
        return json.dumps(json.loads(content), ensure_ascii=False)
    except (json.JSONDecodeError, TypeError):
        return content


def reference_contexts(env: Any, cfg: HierarchyConfig, seed: int, level: int) -> list[Context]:
    """Every context of one reference episode, workers in order then the manager: the warm
    start's demonstrations (``(context.messages, context.tools)`` each)."""
    h = Hierarchy(env, cfg)
    h.reset(seed=seed, options={"level": level})
    for _ in range(cfg.max_subgoals * (cfg.worker_turns + 1) + 2):
        if h.act(h.reference_action()).kind == "end":
            return [w["context"] for w in h.workers] + [h.manager]
    raise AssertionError("the hierarchical reference episode did not end")


def hierarchical_demos(make_env, n: int, levels: list[int], seed0: int,
                       cfg: HierarchyConfig) -> list[tuple[list[Message], Any]]:  # fmt: skip
    """``n`` reference episodes (seeds ``seed0 + i``, levels cycled) as SFT examples, one
    ``(messages, tools)`` per context: each worker's and the manager's."""
    demos = []
    for i in range(n):
        contexts = reference_contexts(make_env(), cfg, seed0 + i, levels[i % len(levels)])
        demos += [(c.messages, c.tools) for c in contexts]
    return demos
