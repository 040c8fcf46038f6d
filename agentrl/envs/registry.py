"""Environments by id: ``register(id, factory, **defaults)``, ``make(id, **overrides)``.

A factory is any callable returning an env, or a ``TaskFamily`` subclass: then ``make``
passes the env keywords (``max_turns``, ``reward_weights``, ``seed``, ``system_prompt``,
``shuffle_tools``) to ``ToolTaskEnv`` and every other keyword to the family's constructor.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.envs.core import ToolTaskEnv
from agentrl.envs.task import TaskFamily

ENV_KWARGS = ("max_turns", "reward_weights", "seed", "system_prompt", "shuffle_tools")


def split_env_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop the ``ToolTaskEnv`` keywords (``ENV_KWARGS``) out of ``kwargs`` and return them;
    what stays in ``kwargs`` is for the family's constructor."""
    return {k: kwargs.pop(k) for k in ENV_KWARGS if k in kwargs}


@dataclass(frozen=True)
class EnvSpec:
    """A registered environment: its id, factory and default keyword arguments."""

    id: str
    factory: Callable[..., Any]
    defaults: dict[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, EnvSpec] = {}


def family_factory(family_cls: type[TaskFamily]) -> Callable[..., ToolTaskEnv]:
    """A factory that builds ``ToolTaskEnv(family_cls(**family_kwargs), **env_kwargs)``."""

    def factory(**kwargs: Any) -> ToolTaskEnv:
        env_kwargs = split_env_kwargs(kwargs)
        return ToolTaskEnv(family_cls(**kwargs), **env_kwargs)

    factory.__name__ = f"make_{family_cls.__name__}"
    return factory


def register(env_id: str, factory: Callable[..., Any], **defaults: Any) -> EnvSpec:
    """Register ``factory`` under ``env_id``; re-registering an id replaces it, with a warning."""
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env id must be a non-empty string, got {env_id!r}")
    if inspect.isclass(factory) and issubclass(factory, TaskFamily):
        factory = family_factory(factory)
    if not callable(factory):
        raise TypeError(f"register({env_id!r}): factory must be callable, got {type(factory)}")
    if env_id in _REGISTRY:
        warnings.warn(f"overriding registered environment {env_id!r}", stacklevel=2)
    spec = EnvSpec(env_id, factory, dict(defaults))
    _REGISTRY[env_id] = spec
    return spec


def make(
    env_id: str, *, last_actions: int = 0, plan_execute: bool = False, **overrides: Any
) -> Any:
    """Build the environment registered as ``env_id`` (defaults updated by ``overrides``).

    ``last_actions``: k > 0 wraps it in ``agentrl.envs.wrappers.LastActions(env, k)`` (each
    turn's observation lists the episode's last k tool calls); ``plan_execute``: then in
    ``agentrl.planning.plan.PlanExecute`` (a planner turn opens the episode).
    """
    spec = _REGISTRY.get(env_id)
    if spec is None:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ValueError(f"no environment registered as {env_id!r}; known ids: {known}")
    if not isinstance(last_actions, int) or last_actions < 0:
        raise ValueError(f"last_actions must be an int >= 0, got {last_actions!r}")
    env = spec.factory(**{**spec.defaults, **overrides})
    if last_actions:
        from agentrl.envs.wrappers import LastActions

        env = LastActions(env, last_actions)
    if plan_execute:
        from agentrl.planning.plan import PlanExecute

        env = PlanExecute(env)
    return env


def list_envs() -> list[str]:
    """The registered ids, sorted."""
    return sorted(_REGISTRY)


def spec(env_id: str) -> EnvSpec:
    """The ``EnvSpec`` of a registered id (``KeyError`` if absent)."""
    return _REGISTRY[env_id]
