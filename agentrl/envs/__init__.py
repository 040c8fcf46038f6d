"""Environments: the Env API, task families, the registry, the reference solver, check_env.

``agentrl.envs.make("weather")`` builds the demo environment; ``register`` adds your own.
"""

from agentrl.envs.checker import check_env
from agentrl.envs.core import Env, ToolTaskEnv, assistant_message, result_status
from agentrl.envs.reference import format_call, reference_action, run_reference_episode
from agentrl.envs.registry import EnvSpec, family_factory, list_envs, make, register, spec
from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.envs.tasks import WeatherFamily  # registers the built-in families

__all__ = [
    "Env",
    "EnvSpec",
    "TaskFamily",
    "TaskInstance",
    "ToolTaskEnv",
    "WeatherFamily",
    "assistant_message",
    "check_env",
    "family_factory",
    "format_call",
    "list_envs",
    "make",
    "reference_action",
    "register",
    "result_status",
    "run_reference_episode",
    "spec",
]
