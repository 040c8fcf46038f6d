"""ToolGuard: the only path from a model's tool call to a tool (DESIGN contract 2).

Every call returns a ``ToolResult``, never raises for anything a model can cause:

1. lookup: an unknown name -> ``unknown_tool`` (listing the tools there are);
2. validation against the tool's JSON Schema -> ``invalid_arguments`` naming the argument, what
   was expected and what came (optional safe coercion ``"3" -> 3``, counted);
3. circuit breaker per tool -> ``circuit_open`` at once while open;
4. dispatch with a dynamic timeout ``base x (mean + std of recent latencies)`` clamped to
   ``[floor, ceiling]``, chosen by the harness (never by the call's arguments): in a worker
   process (``mode: worker``: a call past the timeout is killed -> ``timeout``; a worker that
   dies -> ``worker_crash``, a harness fault) or in-process (``mode: inprocess``, for cheap pure
   tools: fastest, but a hung call cannot be killed there);
5. sanitizing: any return value -> JSON-safe text capped at ``max_result_chars``
   (``truncated_output`` counted; the result stays ok);
6. fallback per tool on timeout / exception / circuit_open: a default value, another tool, or
   a message (harness faults are never papered over: the episode must end ``harness_error``).

Counts per tool and failure class are kept on the guard and on the process-wide
``HealthBoard`` (``rates()`` -> ``tool/<name>/<class>_rate``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import replace
from typing import Any

from agentrl.tools import runtime
from agentrl.tools.errors import HARNESS_CODES, HarnessFault
from agentrl.tools.health import HealthBoard
from agentrl.tools.registry import Tool, ToolRegistry
from agentrl.tools.sanitize import MAX_RESULT_CHARS, safe_str, sanitize, to_jsonable
from agentrl.tools.settings import Policy, ToolsConfig, resolve_policy
from agentrl.tools.validate import describe_validation_error, validate_arguments
from agentrl.tools.workers import Outcome, WorkerPool
from agentrl.types import ToolCall, ToolResult

FAILURE_CLASSES = (
    "invalid_arguments",
    "unknown_tool",
    "parse_error",
    "timeout",
    "exception",
    "circuit_open",
    "truncated_output",
    *HARNESS_CODES,
)
MAX_MESSAGE_CHARS = 1_000
__all__ = [
    "FAILURE_CLASSES",
    "HARNESS_CODES",
    "MAX_RESULT_CHARS",
    "ToolGuard",
    "describe_validation_error",
    "sanitize",
    "to_jsonable",
]


def run_inprocess(fn: Any, kwargs: dict[str, Any], max_chars: int) -> Outcome:
    """Call ``fn(**kwargs)`` here; exceptions (and ``SystemExit``) become outcomes."""
    start = time.perf_counter()
    try:
        value = fn(**kwargs)
    except HarnessFault as exc:
        latency = time.perf_counter() - start
        detail = f"{type(exc).__name__}: {safe_str(exc)}"
        return Outcome("harness", latency_s=latency, detail=detail, code=exc.code)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the model must see any tool failure
        latency = time.perf_counter() - start
        detail = f"{type(exc).__name__}: {safe_str(exc)}"
        return Outcome("exception", latency_s=latency, detail=detail)
    latency = time.perf_counter() - start
    text, truncated = sanitize(value, max_chars)
    return Outcome("ok", text, truncated, latency)


class ToolGuard:
    """Validate, dispatch and sanitize tool calls; count failures per tool and class.

    ``settings`` (a ``ToolsConfig`` or dict), ``health`` and ``pool`` default to the
    process-wide ones of ``agentrl.tools.runtime``; ``max_result_chars`` overrides the policy's.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        max_result_chars: int | None = None,
        settings: ToolsConfig | dict[str, Any] | None = None,
        health: HealthBoard | None = None,
        pool: WorkerPool | None = None,
    ) -> None:
        if settings is None:
            settings = runtime.current_settings()
        elif not isinstance(settings, ToolsConfig):
            settings = ToolsConfig.model_validate(settings)
        self.registry = registry
        self.settings: ToolsConfig = settings
        self.max_result_chars = max_result_chars
        self._health = health
        self._pool = pool
        self._policies: dict[str, tuple[Tool, Policy]] = {}
        self.failures: Counter[tuple[str, str]] = Counter()
        self.calls: Counter[str] = Counter()
        self.coerced: Counter[str] = Counter()

    @property
    def health(self) -> HealthBoard:
        """The health board (latencies, breakers, counters) this guard reports to."""
        if self._health is None:
            self._health = runtime.shared_health()
        return self._health

    @property
    def pool(self) -> WorkerPool:
        """The worker pool used for ``mode: worker`` tools."""
        if self._pool is None:
            self._pool = runtime.shared_pool()
        return self._pool

    def policy(self, t: Tool) -> Policy:
        """The resolved policy of tool ``t`` (cached per tool object)."""
        hit = self._policies.get(t.name)
        if hit is not None and hit[0] is t:
            return hit[1]
        policy = resolve_policy(self.settings, t.name, t.policy)
        if self.max_result_chars is not None:
            policy = replace(policy, max_result_chars=self.max_result_chars)
        self._policies[t.name] = (t, policy)
        return policy

    def error(self, name: str, code: str, message: str, latency: float = 0.0) -> ToolResult:
        """Record one failure and build the result the model reads."""
        self.failures[(name, code)] += 1
        self.health.count(name, code)
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS] + "..."
        content = json.dumps({"error": code, "message": message}, ensure_ascii=False)
        return ToolResult(name, content, ok=False, error_code=code, latency_s=latency)

    def call(self, call: ToolCall) -> ToolResult:
        """Run one call; never raises for anything the model can cause."""
        self.calls[call.name] += 1
        self.health.count(call.name)
        t = self.registry.get(call.name)
        if t is None:
            known = ", ".join(self.registry.names) or "none"
            return self.error(
                call.name, "unknown_tool", f"No tool named {call.name!r}. Available tools: {known}."
            )
        policy = self.policy(t)
        args, err, coerced = validate_arguments(t, call.arguments, coerce=policy.coerce_arguments)
        if err is not None:
            return self.error(call.name, "invalid_arguments", err)
        if coerced:
            self.coerced[call.name] += 1
            self.health.count(call.name, "coerced")
        result = self._run(t, args, policy, allow_fallback=True)
        return replace(result, coerced=tuple(coerced)) if coerced else result

    def _run(
        self, t: Tool, args: dict[str, Any], policy: Policy, allow_fallback: bool
    ) -> ToolResult:
        health = self.health.get(t.name, policy)
        if not health.breaker.allow():
            wait = health.breaker.retry_in()
            message = (
                f"{t.name} is unavailable after repeated failures (circuit open); "
                f"try again in {wait:.0f} s or do without it."
            )
            return self._failed(t, args, "circuit_open", message, 0.0, allow_fallback)
        timeout = health.timeout(policy)
        if policy.mode == "worker":
            out = self.pool.run(
                t.fn, args, timeout=timeout, max_chars=policy.max_result_chars, name=t.name
            )
        else:
            out = run_inprocess(t.fn, args, policy.max_result_chars)
        if out.kind in ("ok", "exception"):
            health.add_latency(out.latency_s)
        code = {
            "ok": None,
            "exception": "exception",
            "timeout": "timeout",
            "crash": "worker_crash",
            "harness": out.code or "sandbox_error",
        }[out.kind]
        health.breaker.record(code is None or code not in self.settings.breaker_counts)
        if code is None:
            if out.truncated:
                self.failures[(t.name, "truncated_output")] += 1
                self.health.count(t.name, "truncated_output")
            return ToolResult(t.name, out.text, ok=True, latency_s=out.latency_s,
                              truncated_output=out.truncated)  # fmt: skip
        message = {
            "timeout": f"{t.name} did not answer within {timeout:.3g} s and was stopped.",
            "worker_crash": f"{t.name}: the tool's worker process died ({out.detail}).",
        }.get(code, out.detail)
        return self._failed(t, args, code, message, out.latency_s, allow_fallback)

    def _failed(
        self, t: Tool, args: dict[str, Any], code: str, message: str, latency: float, allow: bool
    ) -> ToolResult:
        """Count the failure, then apply the tool's fallback if it covers ``code``."""
        result = self.error(t.name, code, message, latency)
        fb = self.policy(t).fallback
        if not allow or fb is None or code not in fb.on:
            return result
        if fb.kind == "message":
            content = json.dumps({"error": code, "message": fb.message}, ensure_ascii=False)
            return replace(result, content=content, fallback="message")
        if fb.kind == "default":
            text, _ = sanitize(fb.value, self.policy(t).max_result_chars)
            return ToolResult(t.name, text, ok=True, latency_s=latency, fallback="default")
        other = self.registry.get(fb.tool or "")
        if other is None or other is t:
            return result
        other_args, err, _ = validate_arguments(other, args)
        if err is not None:
            return result
        alt = self._run(other, other_args, self.policy(other), allow_fallback=False)
        if not alt.ok:
            return result
        return replace(alt, name=t.name, fallback=f"tool:{other.name}")

    def record_parse_error(self) -> None:
        """Malformed calls never reach a tool but are counted with the rest."""
        self.failures[("<parse>", "parse_error")] += 1
        self.health.count("<parse>", "parse_error")

    def rates(self) -> dict[str, float]:
        """``tool/<name>/<class>_rate`` (and ``coerced_rate``) over this guard's calls."""
        out: dict[str, float] = {}
        for (name, code), n in self.failures.items():
            out[f"tool/{name}/{code}_rate"] = n / max(self.calls.get(name, 0), 1)
        for name, n in self.coerced.items():
            out[f"tool/{name}/coerced_rate"] = n / max(self.calls.get(name, 0), 1)
        return out
