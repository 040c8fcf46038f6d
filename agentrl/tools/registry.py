"""Tools: a name, a description and JSON-Schema parameters, built from a plain function.

``@tool`` reads the type hints and the Google-style docstring of a function::

    @tool
    def get_weather(city: str, unit: Literal["c", "f"] = "c") -> dict:
        '''Current weather for a city.

        Args:
            city: City name, e.g. "Paris".
            unit: Temperature unit.
        '''

``tool_from_schema`` wraps a function with a raw schema; ``ToolRegistry`` holds tools by name.
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")


@dataclass(frozen=True)
class Tool:
    """A callable the agent may use, with the JSON schema the model reads."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any] = field(compare=False, repr=False)
    #: How the guard runs it (``agentrl.tools.settings.ToolPolicy`` fields, e.g.
    #: ``{"mode": "worker"}``); config ``tools.per_tool`` overrides it.
    policy: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {_NAME_RE.pattern}")
        if not callable(self.fn):
            raise TypeError(f"tool {self.name!r}: fn must be callable, got {type(self.fn)}")
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON schema of type object")

    def schema(self) -> dict[str, Any]:
        """The OpenAI / HF chat-template form: ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def __call__(self, **kwargs: Any) -> Any:
        return self.fn(**kwargs)


def _json_type(annotation: Any, where: str) -> dict[str, Any]:
    """JSON schema for one Python type annotation."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is str:
        return {"type": "string"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if annotation is type(None):
        return {"type": "null"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"type": "string", "enum": [m.value for m in annotation]}
    if origin is typing.Literal:
        values = list(args)
        kinds = {type(v) for v in values}
        schema: dict[str, Any] = {"enum": values}
        if kinds == {str}:
            schema["type"] = "string"
        elif kinds <= {int}:
            schema["type"] = "integer"
        return schema
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            inner = _json_type(non_null[0], where)
            if len(non_null) < len(args) and isinstance(inner.get("type"), str):
                inner["type"] = [inner["type"], "null"]  # Optional[X]: null is accepted too
                if "enum" in inner:
                    inner["enum"] = [*inner["enum"], None]
            return inner
        return {"anyOf": [_json_type(a, where) for a in args]}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set):
        item = args[0] if args else Any
        return {"type": "array", "items": _json_type(item, where)}
    if origin is dict or annotation is dict:
        return {"type": "object"}
    raise TypeError(f"{where}: unsupported type annotation {annotation!r} for a tool parameter")


def parse_google_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {arg: description})."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        header = re.match(
            r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?):\s*$", stripped
        )
        if header:
            section = header.group(1)
            current = None
            continue
        if section is None:
            summary.append(stripped)
        elif section in ("Args", "Arguments", "Parameters"):
            match = re.match(r"^(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", stripped)
            is_arg_line = line.startswith((" ", "\t")) and not line.startswith(" " * 8)
            if match and (is_arg_line or current is None):
                current = match.group(1)
                args[current] = match.group(3).strip()
            elif current and stripped:
                args[current] = (args[current] + " " + stripped).strip()
    description = " ".join(s for s in summary if s).strip()
    return description, args


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    policy: dict[str, Any] | None = None,
) -> Any:
    """Decorator: make a ``Tool`` from a function's type hints and Google-style docstring.

    ``policy`` sets how the guard runs it, e.g. ``@tool(policy={"mode": "worker"})``.
    """

    def build(func: Callable[..., Any]) -> Tool:
        if not callable(func):
            raise TypeError(f"@tool needs a function, got {type(func).__name__}")
        tool_name = name or func.__name__
        summary, arg_docs = parse_google_docstring(func.__doc__)
        try:
            hints = typing.get_type_hints(func)
        except NameError as exc:  # a hint naming a type not visible at module level
            raise TypeError(
                f"tool {tool_name!r}: cannot resolve type hints ({exc}); "
                "use types importable from the function's module"
            ) from exc
        properties: dict[str, Any] = {}
        required: list[str] = []
        for pname, param in inspect.signature(func).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {tool_name!r}: *args/**kwargs are not supported")
            prop = _json_type(hints.get(pname, param.annotation), f"tool {tool_name!r}.{pname}")
            if pname in arg_docs:
                prop["description"] = arg_docs[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            elif isinstance(param.default, str | int | float | bool) or param.default is None:
                prop["default"] = param.default
            properties[pname] = prop
        parameters = {"type": "object", "properties": properties, "required": required}
        return Tool(tool_name, description or summary or tool_name, parameters, func, policy)

    return build(fn) if fn is not None else build


def tool_from_schema(
    name: str,
    description: str,
    parameters: dict[str, Any],
    fn: Callable[..., Any],
    policy: dict[str, Any] | None = None,
) -> Tool:
    """A tool from a raw schema ``{"type": "object", "properties": ..., "required": [...]}``."""
    return Tool(name, description, dict(parameters), fn, policy)


class ToolRegistry:
    """Tools by name; tools may be added and removed while training runs."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, t: Tool) -> Tool:
        if not isinstance(t, Tool):
            raise TypeError(f"register() takes a Tool (use @tool), got {type(t).__name__}")
        if t.name in self._tools and self._tools[t.name] is not t:
            raise ValueError(f"a different tool named {t.name!r} is already registered")
        self._tools[t.name] = t
        return t

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self):
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self._tools.values()]
