"""@tool schemas from type hints + Google docstrings, raw-schema tools, clear errors."""

from __future__ import annotations

from typing import Literal

import pytest

from agentrl.tools.registry import Tool, ToolRegistry, tool, tool_from_schema


@tool
def search(
    query: str,
    limit: int = 5,
    ratio: float = 0.5,
    exact: bool = False,
    tags: list[str] | None = None,
    order: Literal["asc", "desc"] = "asc",
    page: int | None = None,
) -> dict:
    """Search the catalogue.

    Args:
        query: Words to look for.
        limit: Max results,
            at most 50.
        order: Sort order.

    Returns:
        The hits.
    """
    return {"query": query, "limit": limit}


def test_schema_from_hints_and_docstring():
    assert isinstance(search, Tool)
    assert search.name == "search"
    assert search.description == "Search the catalogue."
    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to look for."},
            "limit": {"type": "integer", "description": "Max results, at most 50.", "default": 5},
            "ratio": {"type": "number", "default": 0.5},
            "exact": {"type": "boolean", "default": False},
            "tags": {"type": ["array", "null"], "items": {"type": "string"}, "default": None},
            "order": {
                "enum": ["asc", "desc"],
                "type": "string",
                "description": "Sort order.",
                "default": "asc",
            },
            "page": {"type": ["integer", "null"], "default": None},
        },
        "required": ["query"],
    }
    assert search(query="x") == {"query": "x", "limit": 5}


def test_schema_form_for_the_chat_template():
    s = search.schema()
    assert s["type"] == "function"
    assert s["function"]["name"] == "search"
    assert s["function"]["parameters"]["required"] == ["query"]


def test_decorator_with_name_and_description():
    @tool(name="lookup", description="Look up.")
    def f(x: int) -> int:
        return x

    assert (f.name, f.description, f.parameters["required"]) == ("lookup", "Look up.", ["x"])


def test_raw_schema_tool():
    params = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    t = tool_from_schema("double", "Double a number.", params, lambda a: 2 * a)
    assert t(a=4) == 8
    assert t.schema()["function"]["parameters"] == params


class Thing:
    """Not a JSON type."""


def test_bad_tools_raise_clearly():
    with pytest.raises(TypeError, match=r"'bad'\.x.*unsupported type"):

        @tool
        def bad(x: Thing) -> None:
            """Bad."""

    with pytest.raises(TypeError, match=r"\*args"):

        @tool
        def star(*xs: int) -> None:
            """Star."""

    with pytest.raises(TypeError, match=r"'local'.*cannot resolve"):

        @tool
        def local(x: Unknown) -> None:  # noqa: F821 - the point of the test
            """Hint names an undefined type."""

    with pytest.raises(TypeError, match="needs a function"):
        tool(42)
    with pytest.raises(ValueError, match="must match"):
        tool_from_schema("bad name!", "d", {"type": "object"}, print)
    with pytest.raises(ValueError, match="type object"):
        tool_from_schema("ok", "d", {"type": "array"}, print)


def test_registry():
    reg = ToolRegistry([search])
    assert reg.names == ["search"] and "search" in reg and len(reg) == 1
    reg.register(search)  # the same tool again is fine
    other = tool_from_schema("search", "d", {"type": "object"}, print)
    with pytest.raises(ValueError, match="already registered"):
        reg.register(other)
    with pytest.raises(TypeError, match="use @tool"):
        reg.register(print)
    reg.remove("search")
    assert reg.get("search") is None and reg.schemas() == []
