"""Argument validation against a tool's JSON Schema, with optional safe coercion.

``validate_arguments(tool, args, coerce=False)`` returns ``(arguments, error, coerced)``:
the (possibly coerced) arguments, a readable error message or ``None``, and the names of the
arguments that were coerced. It never raises for anything a model can send; a tool whose own
schema is broken is a programmer error and raises ``ValueError`` naming the tool.
"""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any

import jsonschema

from agentrl.tools.registry import Tool

_MAX_SHOWN = 80  # characters of a bad value quoted back to the model
_INT_RE = re.compile(r"^\s*[-+]?\d{1,30}\s*$")
_cache: dict[int, tuple[Tool, jsonschema.protocols.Validator]] = {}
_by_schema: dict[str, jsonschema.protocols.Validator] = {}
_cache_lock = threading.Lock()


def shown(value: Any) -> str:
    """A short repr of a value for an error message (long values are cut)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a repr that raises must not escape
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def describe_validation_error(tool_name: str, err: jsonschema.ValidationError) -> str:
    """A readable message naming the argument, what was expected and what came."""
    where = ".".join(str(p) for p in err.absolute_path) or "(arguments)"
    if err.validator in ("required", "additionalProperties"):
        return f"{tool_name}: {shown_message(err.message)}."
    expected = err.validator_value
    if err.validator == "enum":
        return (
            f"{tool_name}: argument {where!r} must be one of {shown(expected)}, "
            f"got {shown(err.instance)}."
        )
    if err.validator == "type":
        return (
            f"{tool_name}: argument {where!r} must be of type {expected}, "
            f"got {shown(err.instance)}."
        )
    return f"{tool_name}: argument {where!r} is invalid: {shown_message(err.message)}."


def shown_message(message: str, limit: int = 300) -> str:
    """A jsonschema message cut to ``limit`` characters (it may quote a huge value)."""
    return message if len(message) <= limit else message[: limit - 3] + "..."


def validator_for(tool: Tool) -> jsonschema.protocols.Validator:
    """The cached validator of ``tool``'s parameters (schema checked once per schema).

    Cached by tool identity (fast path) and by schema content (tools rebuilt every episode
    share one validator); both caches are bounded.
    """
    hit = _cache.get(id(tool))
    if hit is not None and hit[0] is tool:
        return hit[1]
    key = json.dumps(tool.parameters, sort_keys=True, default=repr)
    validator = _by_schema.get(key)
    if validator is None:
        cls = jsonschema.validators.validator_for(tool.parameters, jsonschema.Draft202012Validator)
        try:
            cls.check_schema(tool.parameters)
        except jsonschema.SchemaError as err:
            raise ValueError(
                f"tool {tool.name!r} has an invalid parameters schema: {err.message}"
            ) from None
        validator = cls(tool.parameters)
    with _cache_lock:
        for cache in (_cache, _by_schema):
            if len(cache) > 256:
                cache.clear()
        _by_schema[key] = validator
        _cache[id(tool)] = (tool, validator)
    return validator


def _coerce_value(value: Any, schema: dict[str, Any]) -> tuple[Any, bool]:
    """A string that cleanly reads as the schema's integer / number / boolean, converted."""
    if not isinstance(value, str) or not isinstance(schema, dict):
        return value, False
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    if "string" in kinds:
        return value, False
    if "integer" in kinds and _INT_RE.match(value):
        return int(value), True
    if "number" in kinds:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if math.isfinite(number) and len(value) <= 64:
            return (int(number) if number.is_integer() and "." not in value else number), True
    if "boolean" in kinds and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true", True
    return value, False


def coerce_arguments(
    arguments: dict[str, Any], parameters: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """Safe coercion of top-level arguments ("3" -> 3 for an integer parameter)."""
    props = parameters.get("properties") or {}
    out = dict(arguments)
    coerced: list[str] = []
    for name, value in arguments.items():
        new, changed = _coerce_value(value, props.get(name, {}))
        if changed:
            out[name] = new
            coerced.append(name)
    return out, coerced


def unknown_argument_error(tool: Tool, arguments: dict[str, Any]) -> str | None:
    """A message naming argument keys the schema does not list, or None.

    A schema without ``additionalProperties`` admits any key, but a tool function does not
    take keys it does not name (the call would fail inside it as a TypeError, scored as the
    tool's fault). Only a schema that says ``additionalProperties`` (true or a schema) admits
    extra keys.
    """
    props = tool.parameters.get("properties")
    if not isinstance(props, dict) or tool.parameters.get("additionalProperties"):
        return None
    extra = [k for k in arguments if k not in props]
    if not extra:
        return None
    names = ", ".join(shown(k) for k in extra[:5])
    allowed = ", ".join(props) or "none"
    return f"{tool.name}: unknown argument {names}; its arguments are: {allowed}."


def validate_arguments(
    tool: Tool, arguments: Any, *, coerce: bool = False
) -> tuple[dict[str, Any], str | None, list[str]]:
    """Check ``arguments`` against ``tool``'s schema; see the module docstring."""
    if not isinstance(arguments, dict):
        return {}, f"{tool.name}: arguments must be an object, got {type(arguments).__name__}.", []
    unknown = unknown_argument_error(tool, arguments)
    if unknown is not None:
        return arguments, unknown, []
    validator = validator_for(tool)
    try:
        err = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        if err is not None and coerce:
            fixed, coerced = coerce_arguments(arguments, tool.parameters)
            if coerced:
                fixed_err = jsonschema.exceptions.best_match(validator.iter_errors(fixed))
                if fixed_err is None:
                    return fixed, None, coerced
        if err is not None:
            return arguments, describe_validation_error(tool.name, err), []
    except RecursionError:
        return arguments, f"{tool.name}: arguments are nested too deeply.", []
    return arguments, None, []
