"""``check_env``: validate an environment against the API the rollout relies on.

Drives the env with its own reference solver and checks reset determinism, observation and
info types, termination reasons and reward types. Fails with an ``AssertionError`` that says
what was wrong and where.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl.types import TERMINATIONS, RewardBreakdown

TOOL_CALL_KEYS = {"name", "arguments", "ok", "error_code", "content"}


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise AssertionError(f"check_env: {message}")


def check_schemas(env: Any) -> None:
    """``env.tool_schemas`` is a list of ``{"type": "function", "function": {...}}``."""
    schemas = getattr(env, "tool_schemas", None)
    _require(isinstance(schemas, list), f"env.tool_schemas must be a list, got {type(schemas)}")
    for s in schemas:
        fn = s.get("function") if isinstance(s, dict) else None
        _require(
            isinstance(fn, dict) and s.get("type") == "function",
            f"tool schema {s!r} is not {{'type': 'function', 'function': {{...}}}}",
        )
        _require(
            isinstance(fn.get("name"), str) and isinstance(fn.get("parameters"), dict),
            f"tool schema {fn!r} needs a 'name' string and a 'parameters' object",
        )
    turns = getattr(env, "max_turns", None)
    _require(isinstance(turns, int) and turns >= 1, f"env.max_turns must be an int >= 1: {turns!r}")
    _require(hasattr(env, "guard"), "env.guard (the ToolGuard) is missing")


def check_messages(messages: Any, where: str) -> None:
    """A list of ``{"role": ..., "content": str}`` dicts."""
    _require(isinstance(messages, list) and messages, f"{where}: messages must be a non-empty list")
    for m in messages:
        _require(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str),
            f"{where}: {m!r} is not a {{'role': str, 'content': str}} message",
        )


def check_step(env: Any, out: Any, where: str) -> bool:
    """Check one ``step`` return value; returns whether the episode ended."""
    _require(isinstance(out, tuple) and len(out) == 5, f"{where}: step must return 5 values")
    obs, reward, terminated, truncated, info = out
    _require(isinstance(obs, list), f"{where}: obs must be a list of messages, got {type(obs)}")
    if obs:
        check_messages(obs, where)
        _require(all(m["role"] == "tool" for m in obs), f"{where}: obs roles must be 'tool'")
        _require(env.messages[-len(obs) :] == obs, f"{where}: env.messages must end with obs")
    assistant = env.messages[-len(obs) - 1]
    _require(assistant.get("role") == "assistant", f"{where}: no assistant message before obs")
    _require(type(reward) is float, f"{where}: reward must be a float, got {type(reward)}")
    _require(
        isinstance(terminated, bool) and isinstance(truncated, bool),
        f"{where}: terminated and truncated must be bools",
    )
    _require(not (terminated and truncated), f"{where}: terminated and truncated both set")
    _require(isinstance(info, dict), f"{where}: info must be a dict")
    _require(isinstance(info.get("parse_errors"), list), f"{where}: info['parse_errors'] missing")
    calls = info.get("tool_calls")
    _require(
        isinstance(calls, list) and all(set(c) >= TOOL_CALL_KEYS for c in calls),
        f"{where}: info['tool_calls'] entries need keys {sorted(TOOL_CALL_KEYS)}",
    )
    if not (terminated or truncated):
        _require(reward == 0.0, f"{where}: reward must be 0.0 before the episode ends")
        return False
    term = info.get("termination")
    _require(term in TERMINATIONS, f"{where}: termination {term!r} not in {TERMINATIONS}")
    _require(isinstance(info.get("reward"), RewardBreakdown), f"{where}: info['reward'] missing")
    _require(reward == info["reward"].total, f"{where}: reward != info['reward'].total")
    _require(info.get("success") is (term == "success"), f"{where}: info['success'] mismatch")
    return True


def run_checked_episode(env: Any, seed: int, options: dict[str, Any]) -> tuple[list, dict]:
    """One reference episode with every step checked; returns (messages, final info)."""
    messages, info = env.reset(seed=seed, options=options)
    where = f"seed={seed} options={options}"
    check_messages(messages, f"reset({where})")
    _require(messages[-1]["role"] == "user", f"reset({where}): the last message must be 'user'")
    _require(env.messages == messages, f"reset({where}): env.messages must equal the messages")
    _require(
        isinstance(info.get("task_id"), str) and isinstance(info.get("level"), int),
        f"reset({where}): info needs 'task_id' (str) and 'level' (int), got {info!r}",
    )
    for turn in range(1, env.max_turns + 1):
        action = env.reference_action()
        _require(isinstance(action, str), f"{where}: reference_action() must return a str")
        final = env.step(action)
        if check_step(env, final, f"step {turn} ({where})"):
            return list(env.messages), final[4]
    raise AssertionError(f"check_env: episode {where} did not end within max_turns")


def check_env(
    env: Any,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    levels: Sequence[int] | None = None,
    require_success: bool = True,
) -> dict[str, Any]:
    """Validate ``env``; returns ``{"episodes": n, "success_rate": x}`` of the reference runs."""
    check_schemas(env)
    if levels is None:
        levels = getattr(getattr(env, "family", None), "levels", None) or (None,)
    successes, episodes = 0, 0
    for level in levels:
        options = {} if level is None else {"level": level}
        for seed in seeds:
            first = env.reset(seed=seed, options=options)
            _require(
                env.reset(seed=seed, options=options) == first,
                f"reset(seed={seed}, options={options}) is not deterministic",
            )
            if level is not None:
                _require(first[1].get("level") == level, f"reset: info['level'] != {level}")
            messages, info = run_checked_episode(env, seed, options)
            replay, _ = run_checked_episode(env, seed, options)
            _require(
                replay == messages, f"seed={seed} {options}: reference episode not reproducible"
            )
            _require(
                not require_success or info["success"],
                f"the reference solver failed seed={seed} {options}: "
                f"{info['termination']}; last messages {messages[-2:]!r}",
            )
            later = env.finish("length")
            _require(isinstance(later, RewardBreakdown), "finish() must return a RewardBreakdown")
            successes += int(info["success"])
            episodes += 1
    return {"episodes": episodes, "success_rate": successes / max(episodes, 1)}
