"""Built-in task families, one file each; importing this registers their env ids."""

from agentrl.envs.registry import register
from agentrl.envs.tasks.weather import WeatherFamily

register("weather", WeatherFamily)

__all__ = ["WeatherFamily"]
