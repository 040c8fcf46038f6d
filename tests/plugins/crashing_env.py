"""A ``task.imports`` plugin for tests/test_ray_rollout.py: weather whose process dies.

``weather_crash_once`` (``task.env_kwargs: {flag: PATH}``): the one env step that creates the
file ``flag`` (atomically, so two workers stepping at once cannot both die) kills its process
(``os._exit``); every other step is plain weather. ``weather_crash_always``: every step kills
its process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentrl.envs import make, register


class _Crashing:
    def __init__(self, env, flag: str, always: bool) -> None:
        self.env, self.flag, self.always = env, Path(flag), always

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action_text: str):
        if self.always or self._created_flag():
            os._exit(3)
        return self.env.step(action_text)

    def _created_flag(self) -> bool:
        """Whether this call made ``flag`` (O_EXCL: exactly one caller across processes)."""
        try:
            os.close(os.open(self.flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


def _factory(always: bool):
    def factory(flag: str, **kw: Any) -> _Crashing:
        return _Crashing(make("weather", **kw), flag, always)

    return factory


register("weather_crash_once", _factory(False))
register("weather_crash_always", _factory(True))
