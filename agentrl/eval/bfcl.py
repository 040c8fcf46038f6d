"""Run the Berkeley Function Calling Leaderboard (``bfcl-eval`` data) on a policy.

``run_bfcl(policy, categories, limit)`` returns accuracy per category (and, for single-turn
categories, two partial-credit rates: ``call_rate``, any parsable call, and ``name_accuracy``,
the right functions whatever the arguments). Policies:
``"reference"`` (the possible answers / ground truth replayed: proves the scorer and the
environment runner, ~100%) or an ``HFBFCLPolicy`` (a model rendering the functions with its
chat template and answering with ``<tool_call>`` blocks, greedy).

Multi-turn entries run against the Python environment classes the package ships (file
system, math, trading, travel, vehicle, messaging, posting, tickets): every call of the model
executes on its own instances, the ground truth on a second set, and after every user turn
BFCL's own ``state_checker`` and ``response_checker`` compare the two, as BFCL does.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
from typing import Any

from agentrl.chat.parser import parse_action
from agentrl.envs.core import assistant_message
from agentrl.envs.reference import format_call
from agentrl.eval.bfcl_data import (
    MULTI_TURN,
    SINGLE_TURN,
    data_dir,
    load_category,
    names_match,
    reference_calls,
    safe_name,
    score_single_turn,
    tool_schemas,
)
from agentrl.types import Message, ToolCall

DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system", "MathAPI": "math_api",
    "MessageAPI": "message_api", "TwitterAPI": "posting_api", "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot", "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}  # fmt: skip


class HFBFCLPolicy:
    """A Hugging Face model answering BFCL prompts (batched, greedy)."""

    name = "model"

    def __init__(self, generator: Any, max_new_tokens: int = 160) -> None:
        self.generator = generator
        self.max_new_tokens = max_new_tokens
        self.context = int(getattr(generator.model.config, "max_position_embeddings", 4096))

    def complete(self, batch: list[tuple[list[Message], list[dict]]]) -> list[str]:
        """One assistant turn per (messages, tools); prompts too long for the model get ""."""
        from agentrl.chat.render import encode_prompt

        tok = self.generator.tokenizer
        prompts = [encode_prompt(tok, m, t) for m, t in batch]
        fits = [i for i, p in enumerate(prompts) if len(p) + self.max_new_tokens <= self.context]
        out = [""] * len(batch)
        for start in range(0, len(fits), 16):
            idx = fits[start : start + 16]
            samples = self.generator.generate(
                [prompts[i] for i in idx], max_new_tokens=self.max_new_tokens, greedy=True
            )
            for i, s in zip(idx, samples, strict=True):
                ids = s.ids[:-1] if s.stopped else s.ids
                out[i] = tok.decode(ids, skip_special_tokens=False)
        return out


def _calls_from_text(text: str, names: dict[str, str]) -> list[ToolCall]:
    parsed = parse_action(text)
    return [ToolCall(names.get(c.name, c.name), c.arguments) for c in parsed.tool_calls]


def run_single_turn(policy: Any, category: str, limit: int | None) -> list[dict[str, Any]]:
    """Score every entry of a single-turn category; one record per entry."""
    entries = load_category(category, limit)
    if policy == "reference":
        outputs = [[format_call(c) for c in reference_calls(e)] for e in entries]
        texts = ["\n".join(o) for o in outputs]
        names_list = [{c.name: c.name for c in reference_calls(e)} for e in entries]
    else:
        batch, names_list = [], []
        for e in entries:
            schemas, names = tool_schemas(e["function"])
            batch.append((list(e["question"][0]), schemas))
            names_list.append(names)
        texts = policy.complete(batch)
    records = []
    for e, text, names in zip(entries, texts, names_list, strict=True):
        calls = _calls_from_text(text, names)
        records.append({"id": e["id"], "correct": score_single_turn(e, calls),
                        "called": bool(calls), "names_ok": names_match(e, calls),
                        "output": text})  # fmt: skip
    return records


# -- multi-turn --------------------------------------------------------------------------------
def load_instances(entry: dict[str, Any]) -> dict[str, Any]:
    """Fresh instances of the entry's classes, loaded with its initial configuration."""
    from bfcl_eval.constants.executable_backend_config import (
        CLASS_FILE_PATH_MAPPING,
        STATELESS_CLASSES,
    )

    out = {}
    for cls_name in entry["involved_classes"]:
        try:
            module = importlib.import_module(CLASS_FILE_PATH_MAPPING[cls_name])
        except ModuleNotFoundError as err:  # bfcl-eval was installed with --no-deps
            raise ImportError(
                f"BFCL's {cls_name} needs {err.name}: pip install -e '.[bfcl]'"
            ) from err
        obj = getattr(module, cls_name)()
        if cls_name not in STATELESS_CLASSES:
            config = copy.deepcopy(entry["initial_config"].get(cls_name, {}))
            obj._load_scenario(config, long_context=False)
        out[cls_name] = obj
    return out


def public_methods(instances: dict[str, Any]) -> dict[str, Any]:
    """Method name -> bound method, as BFCL maps calls onto instances."""
    return {
        name: fn
        for obj in instances.values()
        for name, fn in inspect.getmembers(obj, predicate=inspect.ismethod)
        if not name.startswith("_")
    }


def execute(methods: dict[str, Any], call: ToolCall) -> str:
    """Run one call; the result as BFCL formats it (errors as text, never raised)."""
    fn = methods.get(call.name)
    if fn is None:
        return f"Error during execution: name '{call.name}' is not defined"
    try:
        result = fn(**call.arguments)
    except Exception as exc:  # noqa: BLE001 - BFCL records execution errors as results
        return f"Error during execution: {exc}"
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except TypeError:
            return str(result)
    return str(result)


def parse_call_string(text: str, methods: dict[str, Any]) -> ToolCall:
    """A ground-truth string such as ``mv(source='a', destination='b')`` as a ToolCall."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a function call: {text!r}")
    name = node.func.id
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    if args and name in methods:
        bound = inspect.signature(methods[name]).bind_partial(*args, **kwargs)
        kwargs = dict(bound.arguments)
    return ToolCall(name, kwargs)


def entry_functions(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The function docs of the entry's classes, minus its excluded functions."""
    excluded = set(entry.get("excluded_function") or [])
    docs = []
    for cls_name in entry["involved_classes"]:
        path = data_dir() / "multi_turn_func_doc" / f"{DOC_FILES[cls_name]}.json"
        docs += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [d for d in docs if d["name"] not in excluded]


def run_multi_turn_entry(policy: Any, entry: dict[str, Any], max_steps: int = 5) -> dict:
    """Play all user turns of one entry; BFCL's state and response checks after each turn."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (
        response_checker,
        state_checker,
    )

    model_inst, gt_inst = load_instances(entry), load_instances(entry)
    model_methods, gt_methods = public_methods(model_inst), public_methods(gt_inst)
    schemas, names = tool_schemas(entry_functions(entry))
    messages: list[Message] = []
    all_results: list[str] = []
    turns = zip(entry["question"], entry["ground_truth"], strict=True)
    for turn, (user_msgs, gt_turn) in enumerate(turns):
        messages += [dict(m) for m in user_msgs]
        gt_calls = [parse_call_string(s, gt_methods) for s in gt_turn]
        made = 0
        for step in range(max_steps):
            if policy == "reference":
                text = "\n".join(format_call(c) for c in gt_calls) if step == 0 else "Done."
            else:
                text = policy.complete([(messages, schemas)])[0]
            parsed = parse_action(text)
            messages.append(assistant_message(parsed, text))
            if not parsed.tool_calls:
                break
            for c in parsed.tool_calls:
                result = execute(model_methods, ToolCall(names.get(c.name, c.name), c.arguments))
                all_results.append(result)
                messages.append({"role": "tool", "name": c.name, "content": result})
                made += 1
        gt_results = [execute(gt_methods, c) for c in gt_calls]
        if gt_turn and not made:
            return {"id": entry["id"], "correct": False, "error": f"no call in turn {turn}"}
        for check in (state_checker(model_inst, gt_inst),
                      response_checker(all_results, gt_results, turn)):  # fmt: skip
            if not check["valid"]:
                return {"id": entry["id"], "correct": False, "error": check["error_type"]}
    return {"id": entry["id"], "correct": True}


def run_bfcl(
    policy: Any, categories: list[str] | None = None, limit: int | None = None
) -> dict[str, Any]:
    """Accuracy per category (``policy``: "reference" or an ``HFBFCLPolicy``)."""
    categories = categories or [*SINGLE_TURN, *MULTI_TURN]
    report: dict[str, Any] = {"accuracy": {}, "entries": {}, "records": {}}
    for cat in categories:
        if cat in SINGLE_TURN:
            records = run_single_turn(policy, cat, limit)
        elif cat in MULTI_TURN:
            records = [run_multi_turn_entry(policy, e) for e in load_category(cat, limit)]
        else:
            raise ValueError(f"unknown BFCL category {cat!r}")
        n = max(len(records), 1)
        report["accuracy"][cat] = sum(r["correct"] for r in records) / n
        if cat in SINGLE_TURN:  # partial credit, to see progress below full accuracy
            report.setdefault("call_rate", {})[cat] = sum(r["called"] for r in records) / n
            report.setdefault("name_accuracy", {})[cat] = sum(r["names_ok"] for r in records) / n
        report["entries"][cat] = len(records)
        report["records"][cat] = records
    return report


__all__ = ["HFBFCLPolicy", "run_bfcl", "safe_name"]
