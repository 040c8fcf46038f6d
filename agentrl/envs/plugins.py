"""Import user modules that register environments (``task.imports`` in the config)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path


def import_env_modules(names: list[str]) -> None:
    """Import each entry: a dotted module name, or a path to a ``.py`` file."""
    for name in names:
        if name.endswith(".py"):
            path = Path(name)
            if not path.is_file():
                raise FileNotFoundError(f"task.imports: file {name!r} does not exist")
            mod_name = f"agentrl_user_{path.stem}"
            if mod_name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
        else:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as err:
                raise ModuleNotFoundError(f"task.imports: cannot import {name!r}: {err}") from err
