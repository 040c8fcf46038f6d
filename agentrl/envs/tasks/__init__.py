"""Built-in task families, one file each; importing this registers their env ids."""

from agentrl.envs.registry import register
from agentrl.envs.tasks.arith import ArithFamily
from agentrl.envs.tasks.dynamic import DynamicToolsFamily, ToolPool, make_dynamic
from agentrl.envs.tasks.ledger import LedgerFamily
from agentrl.envs.tasks.library import LibraryFamily
from agentrl.envs.tasks.mathgym import MathFamily
from agentrl.envs.tasks.meeting import MeetingFamily
from agentrl.envs.tasks.shaped import ShapedTaskEnv, shaped_factory
from agentrl.envs.tasks.shop import ShopFamily
from agentrl.envs.tasks.weather import WeatherFamily

# shaped: its process layers join the reward with task.env_kwargs.progress_reward=true
register("weather", shaped_factory(WeatherFamily))
# Curriculum families (stage 2: meeting, shop, math; stage 3: library; stage 4: dynamic).
register("meeting", shaped_factory(MeetingFamily), max_turns=8)
register("shop", shaped_factory(ShopFamily), max_turns=8)
register("math", shaped_factory(MathFamily))  # needs reasoning-gym (the "tasks" extra)
register("library", shaped_factory(LibraryFamily), max_turns=8)
register("dynamic", make_dynamic)
register("arith_code", ArithFamily, max_turns=4)  # ToRL: run_python in the sandbox
# Long horizon (12-31 turns at levels 1-3; 40 leaves room for retries and a plan turn).
register("ledger", shaped_factory(LedgerFamily), max_turns=40)
register("ledger_recall", shaped_factory(LedgerFamily, recall=True), max_turns=40)

__all__ = [
    "ArithFamily",
    "DynamicToolsFamily",
    "LedgerFamily",
    "LibraryFamily",
    "MathFamily",
    "MeetingFamily",
    "ShapedTaskEnv",
    "ShopFamily",
    "ToolPool",
    "WeatherFamily",
]
