"""BFCL: the scorer on hand-made answers, the reference policy at 100%, multi-turn envs."""

from __future__ import annotations

import pytest

from agentrl.eval.bfcl_data import bfcl_available

pytestmark = pytest.mark.skipif(not bfcl_available(), reason="bfcl-eval not installed")

from agentrl.eval.bfcl import (  # noqa: E402
    load_instances,
    parse_call_string,
    public_methods,
    run_bfcl,
    run_multi_turn_entry,
)
from agentrl.eval.bfcl_data import (  # noqa: E402
    load_category,
    names_match,
    score_single_turn,
    to_json_schema,
    tool_schemas,
)
from agentrl.types import ToolCall  # noqa: E402


def test_reference_scores_100_percent_everywhere():
    report = run_bfcl("reference", limit=40)
    assert report["accuracy"] == {"simple": 1.0, "multiple": 1.0, "parallel": 1.0,
                                  "parallel_multiple": 1.0, "multi_turn_base": 1.0}  # fmt: skip
    assert report["entries"]["simple"] == 40
    assert report["call_rate"]["parallel"] == 1.0 and report["name_accuracy"]["multiple"] == 1.0
    assert "multi_turn_base" not in report["name_accuracy"]  # partial credit: single-turn only


def test_scorer_rules_on_a_simple_entry():
    e = load_category("simple", 1)[0]  # calculate_triangle_area(base=10, height=5, unit?)
    name = "calculate_triangle_area"
    assert score_single_turn(e, [ToolCall(name, {"base": 10, "height": 5})])
    assert score_single_turn(e, [ToolCall(name, {"base": 10, "height": 5, "unit": "Units"})])
    assert not score_single_turn(e, [ToolCall(name, {"base": 10})])  # required value missing
    assert not score_single_turn(e, [ToolCall(name, {"base": 10, "height": 6})])  # wrong value
    assert not score_single_turn(e, [ToolCall(name, {"base": 10, "height": 5, "color": 1})])
    assert not score_single_turn(e, [ToolCall("area", {"base": 10, "height": 5})])
    assert not score_single_turn(e, [ToolCall(name, {"base": 10, "height": 5})] * 2)
    assert names_match(e, [ToolCall(name, {"base": 1})])  # partial credit: the right function
    assert not names_match(e, [ToolCall(name, {})] * 2) and not names_match(e, [])


def test_parallel_calls_match_in_any_order():
    e = load_category("parallel", 1)[0]  # spotify.play x2
    a = ToolCall("spotify.play", {"artist": "Taylor Swift", "duration": 20})
    b = ToolCall("spotify.play", {"artist": "Maroon 5", "duration": 15})
    assert score_single_turn(e, [b, a]) and not score_single_turn(e, [a, a])


def test_schema_conversion_and_safe_names():
    assert to_json_schema({"type": "dict", "properties": {"x": {"type": "float"},
                           "t": {"type": "tuple"}, "a": {"type": "any"}}}) == {
        "type": "object", "properties": {"x": {"type": "number"}, "t": {"type": "array"},
                                         "a": {}}}  # fmt: skip
    schemas, names = tool_schemas([{"name": "math.factorial", "parameters": {"type": "dict"}}])
    assert schemas[0]["function"]["name"] == "math_factorial"
    assert names == {"math_factorial": "math.factorial"}


def test_multi_turn_wrong_state_fails_and_positional_calls_parse():
    e = load_category("multi_turn_base", 1)[0]
    methods = public_methods(load_instances(e))
    assert parse_call_string("sort('final_report.pdf')", methods) == ToolCall(
        "sort", {"file_name": "final_report.pdf"})  # fmt: skip

    class Lazy:  # does one wrong call per turn
        def complete(self, batch):
            return ['<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>']

    rec = run_multi_turn_entry(Lazy(), e, max_steps=1)
    assert rec["correct"] is False and rec["error"].startswith("multi_turn:")


def test_a_missing_environment_dependency_names_the_install(monkeypatch):
    import sys

    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    monkeypatch.setitem(sys.modules, "mpmath", None)  # bfcl-eval installed with --no-deps
    monkeypatch.delitem(sys.modules, CLASS_FILE_PATH_MAPPING["MathAPI"], raising=False)
    with pytest.raises(ImportError, match=r"MathAPI needs mpmath: pip install -e '\.\[bfcl\]'"):
        load_instances({"involved_classes": ["MathAPI"], "initial_config": {}})
