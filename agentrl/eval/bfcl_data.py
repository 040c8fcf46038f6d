"""Berkeley Function Calling Leaderboard data, read from the ``bfcl-eval`` wheel, and its scorer.

Install with ``pip install --no-deps bfcl-eval`` (its pinned dependencies conflict with ours;
the data files and the multi-turn environment classes need none of them). Everything here
is skipped cleanly when the package is absent: ``bfcl_available()``.

Single-turn categories (``simple``, ``multiple``, ``parallel``, ``parallel_multiple``) are
scored like BFCL's AST checker: the function names must match, every argument the model
gives must be a parameter of the function and equal one of the possible answers (strings
compared after BFCL's ``standardize_string``; an int is accepted for a float), and every
parameter whose possible answers do not include ``""`` must be given. Parallel categories
match the calls in any order, one to one.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from agentrl.types import ToolCall

SINGLE_TURN = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
}
MULTI_TURN = {"multi_turn_base": "multi_turn_base"}
CATEGORIES = (*SINGLE_TURN, *MULTI_TURN)
_STD_RE = re.compile(r"[ \,\.\/\-\_\*\^]")
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


def bfcl_available() -> bool:
    """Is the ``bfcl_eval`` package importable?"""
    return importlib.util.find_spec("bfcl_eval") is not None


def data_dir() -> Path:
    """``bfcl_eval/data`` inside the installed wheel."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("BFCL needs the bfcl-eval package: pip install --no-deps bfcl-eval")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_category(category: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Entries of a category, each with its ``ground_truth`` (possible answers) attached."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL category {category!r}; known: {', '.join(CATEGORIES)}")
    stem = {**SINGLE_TURN, **MULTI_TURN}[category]
    root = data_dir()
    entries = _jsonl(root / f"BFCL_v4_{stem}.json")
    answers = {
        a["id"]: a["ground_truth"]
        for a in _jsonl(root / "possible_answer" / f"BFCL_v4_{stem}.json")
    }
    out = [{**e, "ground_truth": answers[e["id"]]} for e in entries if e["id"] in answers]
    return out[:limit] if limit else out


def to_json_schema(schema: Any) -> Any:
    """BFCL's parameter types (dict, float, tuple, any) as JSON Schema."""
    if isinstance(schema, list):
        return [to_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: to_json_schema(v) for k, v in schema.items() if k != "optional"}
    if isinstance(out.get("type"), str) and out["type"] in _TYPES:
        mapped = _TYPES[out["type"]]
        if mapped is None:
            out.pop("type")
        else:
            out["type"] = mapped
    return out


def safe_name(name: str) -> str:
    """Tool names with dots are not valid tool names for most templates: dots -> underscores."""
    return re.sub(r"[^A-Za-z0-9_\-]", "_", name)


def tool_schemas(functions: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(chat-template tool schemas, safe name -> BFCL name)."""
    schemas, names = [], {}
    for f in functions:
        names[safe_name(f["name"])] = f["name"]
        params = to_json_schema(f.get("parameters", {"type": "dict", "properties": {}}))
        fn = {"name": safe_name(f["name"]), "description": f.get("description", ""),
              "parameters": params}  # fmt: skip
        schemas.append({"type": "function", "function": fn})
    return schemas, names


# -- scoring ---------------------------------------------------------------------------------
def standardize(value: Any) -> Any:
    """BFCL's ``standardize_string`` on strings, recursively through lists and dicts."""
    if isinstance(value, str):
        return _STD_RE.sub("", value).lower().replace("'", '"')
    if isinstance(value, list | tuple):
        return [standardize(v) for v in value]
    if isinstance(value, dict):
        return {k: standardize(v) for k, v in value.items()}
    return value


def value_ok(value: Any, possible: list[Any], ptype: str | None) -> bool:
    """Is ``value`` one of the ``possible`` answers (BFCL's matching rules)?"""
    if ptype == "float" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if ptype == "tuple" and isinstance(value, tuple):
        value = list(value)
    for p in possible:
        if p == "":
            continue
        if type(value) is bool or type(p) is bool:
            if value is p:
                return True
            continue
        if isinstance(p, int | float) and isinstance(value, int | float):
            if ptype == "integer" and isinstance(value, float):
                continue
            if float(p) == float(value):
                return True
        elif standardize(p) == standardize(value):
            return True
    return False


def call_ok(call: ToolCall, answer: dict[str, Any], functions: dict[str, dict]) -> bool:
    """Does one model call match one ground-truth call ``{name: {param: [possible...]}}``?"""
    ((name, params),) = answer.items()
    if call.name != name or name not in functions:
        return False
    props = functions[name].get("parameters", {}).get("properties", {})
    for arg, value in call.arguments.items():
        if arg not in params or not value_ok(value, params[arg], props.get(arg, {}).get("type")):
            return False
    return all(arg in call.arguments for arg, poss in params.items() if "" not in poss)


def _match(calls: list[ToolCall], answers: list[dict], functions: dict[str, dict]) -> bool:
    if not answers:
        return not calls
    first, rest = answers[0], answers[1:]
    for i, c in enumerate(calls):
        if call_ok(c, first, functions) and _match(calls[:i] + calls[i + 1 :], rest, functions):
            return True
    return False


def score_single_turn(entry: dict[str, Any], calls: list[ToolCall]) -> bool:
    """BFCL AST correctness of a model's calls for one single-turn entry (module docstring)."""
    functions = {f["name"]: f for f in entry["function"]}
    answers = entry["ground_truth"]
    return len(calls) == len(answers) and _match(list(calls), list(answers), functions)


def names_match(entry: dict[str, Any], calls: list[ToolCall]) -> bool:
    """Partial credit: the calls name exactly the ground truth's functions (arguments unchecked)."""
    want = sorted(next(iter(a)) for a in entry["ground_truth"])
    return sorted(c.name for c in calls) == want


def reference_calls(entry: dict[str, Any]) -> list[ToolCall]:
    """The calls a perfect model makes: the first non-empty possible value of each argument."""
    calls = []
    for answer in entry["ground_truth"]:
        ((name, params),) = answer.items()
        given = {k: [v for v in poss if v != ""] for k, poss in params.items()}
        args = {k: vals[0] for k, vals in given.items() if vals}
        calls.append(ToolCall(name, args))
    return calls
