"""A ``task.imports`` plugin for tests/test_ray_rollout.py: weather whose process dies.

``weather_crash_once`` (``task.env_kwargs: {flag: PATH}``): an env step kills its process
(``os._exit``) if the file ``flag`` does not exist yet, creating it first; once it exists every
step is plain weather. ``weather_crash_always``: every step kills its process.
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
        if self.always or not self.flag.exists():
            self.flag.write_text(str(os.getpid()))
            os._exit(3)
        return self.env.step(action_text)


def _factory(always: bool):
    def factory(flag: str, **kw: Any) -> _Crashing:
        return _Crashing(make("weather", **kw), flag, always)

    return factory


register("weather_crash_once", _factory(False))
register("weather_crash_always", _factory(True))
