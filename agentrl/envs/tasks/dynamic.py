"""Dynamic tools (curriculum stage 4, ``make("dynamic")``): tools come and go during training.

Synthetic lookup tools are generated from (kind, quantity) pairs, e.g.
``fetch_reservoir_depth(reservoir_id, year)``, each backed by a seeded table. The pairs are
split once: ``train`` tools (4 of 5) and ``heldout`` tools (1 of 5, never offered in training),
so evaluation on ``make("dynamic", split="heldout")`` uses tools known only by their schema.

A ``ToolPool`` holds the active tools of a split and is shared by every env made with it:
``pool.register(name)`` / ``pool.remove(name)`` / ``pool.rotate(...)`` while training runs
change what the next ``reset`` offers (``env.tool_schemas`` is refreshed per episode).

Levels: 1 = one lookup, 2 distractor tools; 2 = a lookup with a ``year`` argument, 4
distractors (one of the same kind); 3 = compare two entities (two calls), 6 distractors.
Verifier: levels 1-2 - the value appears and no other number (the year is allowed); level 3 -
both values appear, the entity with the higher value is named first, the first value given is
its own, and the answer says so (a comparison word: higher, greater, more, ...; the tool
results echoed back claim nothing); or the answer gives the evidence first and concludes last
("B-73 7834 MWh, K-23 2863 MWh: B-73 is higher."): when each entity's first mention is
followed by its own value and an entity is named after the last number, the first one named
there is the answer.

``answer_style`` picks the reference solver's form at level 3 (its demonstrations teach it):
"claim" (the default: the higher entity first) or "evidence" (both values in the order asked,
then the conclusion: the model compares numbers it has just written).
"""

from __future__ import annotations

import random
import re
import zlib
from typing import Any

from agentrl.envs.core import ToolTaskEnv
from agentrl.envs.registry import split_env_kwargs
from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.envs.tasks.answers import evidence_conclusion
from agentrl.envs.tasks.shaped import ShapedTaskEnv, duplicate_results
from agentrl.tools.registry import Tool, ToolRegistry, tool_from_schema
from agentrl.types import ToolCall

KINDS = ("station", "warehouse", "satellite", "reservoir", "vessel", "sensor", "server",
         "orchard", "bridge", "turbine")  # fmt: skip
QUANTITIES = {
    "elevation": "m", "population": "people", "price": "USD", "rating": "points", "stock": "units",
    "humidity": "%", "speed": "km/h", "capacity": "t", "depth": "m", "weight": "kg",
    "voltage": "V", "output": "MWh", "temperature": "C", "age": "years", "load": "%",
}  # fmt: skip
VERBS = ("get", "fetch", "lookup", "query", "read")
YEARS = (2019, 2020, 2021, 2022, 2023, 2024)
SPLITS = ("train", "heldout")
ANSWER_STYLES = ("claim", "evidence")
SYSTEM_PROMPT = "You are a data assistant. Use the tools to look values up, then answer briefly."
_NUMBER_RE = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?")
_CLAIM_RE = re.compile(r"\b(higher|highest|greater|greatest|larger|largest|more|bigger|biggest|"
                       r"exceeds?|tops)\b", re.IGNORECASE)  # fmt: skip


def tool_spec(kind: str, quantity: str) -> dict[str, Any]:
    """The name, description and split of the tool for (kind, quantity)."""
    h = zlib.crc32(f"{kind}/{quantity}".encode())
    return {
        "name": f"{VERBS[h % len(VERBS)]}_{kind}_{quantity}",
        "kind": kind,
        "quantity": quantity,
        "unit": QUANTITIES[quantity],
        "split": "heldout" if (h >> 8) % 5 == 0 else "train",
    }


ALL_SPECS = {s["name"]: s for s in (tool_spec(k, q) for k in KINDS for q in QUANTITIES)}


def value_of(spec: dict, entity: str, year: int | None) -> int:
    """The table value of ``spec`` for ``entity`` in ``year`` (None: the latest, so a call
    without a year and one naming the latest year read the same record); deterministic."""
    return random.Random(f"{spec['name']}|{entity}|{year or YEARS[-1]}").randint(1, 9999)


def make_tool(spec: dict) -> Tool:
    """The ``Tool`` for a spec: ``(<kind>_id, year)`` -> ``{<kind>_id, year, <quantity>, unit}``."""
    id_arg = f"{spec['kind']}_id"
    params = {
        "type": "object",
        "properties": {
            id_arg: {"type": "string", "description": f"The {spec['kind']}'s id, e.g. 'K-17'."},
            "year": {"type": "integer", "description": "Year of the record (default: latest)."},
        },
        "required": [id_arg],
    }

    def fn(**kwargs: Any) -> dict:
        entity, year = str(kwargs[id_arg]).strip().upper(), kwargs.get("year")
        if not re.fullmatch(r"[A-Z]-\d{1,3}", entity):
            raise ValueError(f"{id_arg} must look like 'K-17', got {kwargs[id_arg]!r}.")
        if year is not None and year not in YEARS:
            raise ValueError(f"No records for {year}; years: {YEARS[0]}-{YEARS[-1]}.")
        value = value_of(spec, entity, year)
        return {id_arg: entity, "year": year or YEARS[-1], spec["quantity"]: value,
                "unit": spec["unit"]}  # fmt: skip

    desc = f"The {spec['quantity']} ({spec['unit']}) of a {spec['kind']}, by id and year."
    return tool_from_schema(spec["name"], desc, params, fn)


def entity_mentions(answer: str, entities: list[str]) -> list[tuple[int, str]]:
    """Every mention of ``entities`` (ids like "K-17", any case) in ``answer`` as (position,
    entity); positions index ``answer`` itself, as the verifier's number positions do."""
    return sorted(
        (m.start(), e)
        for e in entities
        for m in re.finditer(rf"(?<![\w-]){e}(?!\d)", answer, re.IGNORECASE)
    )


class ToolPool:
    """The active tools of one split; shared by envs, changed while training runs."""

    def __init__(self, split: str = "train", active: list[str] | None = None) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.split = split
        self.names = sorted(n for n, s in ALL_SPECS.items() if s["split"] == split)
        self.active: list[str] = sorted(active) if active is not None else list(self.names)
        unknown = set(self.active) - set(self.names)
        if unknown:
            raise ValueError(f"tools {sorted(unknown)} are not in the {split!r} split")
        self.version = 0

    def register(self, name: str) -> None:
        """Offer tool ``name`` (of this split) from the next episode on."""
        if name not in self.names:
            raise ValueError(f"{name!r} is not a {self.split!r} tool; known: {self.names[:5]}...")
        if name not in self.active:
            self.active = sorted([*self.active, name])
            self.version += 1

    def remove(self, name: str) -> None:
        """Stop offering tool ``name``; at least 8 tools must stay active."""
        if name in self.active:
            if len(self.active) <= 8:
                raise ValueError("a pool needs at least 8 active tools")
            self.active = [n for n in self.active if n != name]
            self.version += 1

    def rotate(self, rng: random.Random, k: int = 1) -> tuple[list[str], list[str]]:
        """Remove ``k`` active tools and register ``k`` inactive ones; returns (out, in)."""
        inactive = [n for n in self.names if n not in self.active]
        new = rng.sample(inactive, min(k, len(inactive)))
        old = rng.sample(self.active, min(k, len(self.active) - 8 + len(new)))
        for n in new:
            self.register(n)
        for n in old:
            self.remove(n)
        return old, new

    def state_dict(self) -> dict[str, Any]:
        return {"split": self.split, "active": list(self.active), "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__init__(state["split"], state["active"])
        self.version = int(state["version"])


class DynamicToolsFamily(TaskFamily):
    """Lookups with synthetic tools drawn from a ``ToolPool``."""

    name = "dynamic"
    levels = (1, 2, 3)
    system_prompt = SYSTEM_PROMPT

    def __init__(
        self, pool: ToolPool | None = None, split: str = "train", answer_style: str = "claim"
    ) -> None:
        if answer_style not in ANSWER_STYLES:
            raise ValueError(f"answer_style must be one of {ANSWER_STYLES}, got {answer_style!r}")
        self.pool = pool if pool is not None else ToolPool(split)
        self.answer_style = answer_style

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        """A needed tool among the active ones, distractors, entities and the question."""
        active = list(self.pool.active)
        spec = ALL_SPECS[rng.choice(active)]
        same_kind = [
            n for n in active if ALL_SPECS[n]["kind"] == spec["kind"] and n != spec["name"]
        ]
        others = [n for n in active if n != spec["name"] and n not in same_kind]
        n_distract = {1: 2, 2: 4, 3: 6}[level]
        distract = rng.sample(same_kind, min(1, len(same_kind))) if level >= 2 else []
        distract += rng.sample(others, n_distract - len(distract))
        offered = sorted([spec["name"], *distract])
        entities = [f"{rng.choice('ABCDEFGHJK')}-{rng.randint(1, 99)}" for _ in range(2)]
        year = rng.choice(YEARS) if level >= 2 else None
        what = f"the {spec['quantity']} of {spec['kind']} {{e}}" + (f" in {year}" if year else "")
        id_arg = f"{spec['kind']}_id"
        args = [{id_arg: e, **({"year": year} if year else {})} for e in entities]
        while entities[1] == entities[0] or (
            value_of(spec, entities[0], year) == value_of(spec, entities[1], year)
        ):
            entities[1] = f"{rng.choice('ABCDEFGHJK')}-{rng.randint(1, 99)}"
        if level < 3:
            prompt = f"What is {what.format(e=entities[0])}?"
            calls = [ToolCall(spec["name"], args[0])]
        else:
            when = f" in {year}" if year else ""
            pair = f"{spec['kind']} {entities[0]} or {entities[1]}"
            prompt = f"Which has the higher {spec['quantity']}{when}: {pair}?"
            args[1][id_arg] = entities[1]
            calls = [ToolCall(spec["name"], a) for a in args]
        data = {"spec": spec["name"], "offered": offered, "entities": entities[: len(calls)],
                "year": year, "stages": [0] * len(calls)}  # fmt: skip
        return TaskInstance(
            f"dynamic-L{level}-{rng.getrandbits(32):08x}", level, prompt, data, calls
        )

    def tools(self, instance: TaskInstance) -> list[Tool]:
        """The offered tools (they differ between episodes; ``DynamicEnv`` handles that)."""
        return [make_tool(ALL_SPECS[n]) for n in instance.data["offered"]]

    def _values(self, instance: TaskInstance) -> list[int]:
        spec = ALL_SPECS[instance.data["spec"]]
        return [value_of(spec, e, instance.data["year"]) for e in instance.data["entities"]]

    def check_answer(self, instance: TaskInstance, answer: str) -> bool:
        """The rule-based verifier (see the module docstring)."""
        if not answer.strip() or len(answer) > 400:
            return False
        values = self._values(instance)
        found = [(m.start(), float(m.group())) for m in _NUMBER_RE.finditer(answer)]
        numbers, value_set = {v for _, v in found}, {float(v) for v in values}
        if not numbers <= value_set | {float(instance.data["year"] or -1)}:
            return False
        if not value_set <= numbers:
            return False
        if instance.level < 3:
            return True
        if not _CLAIM_RE.search(answer):
            return False
        ents = instance.data["entities"]
        best = ents[0] if values[0] > values[1] else ents[1]
        named = entity_mentions(answer, ents)
        own = {e: {float(v)} for e, v in zip(ents, values, strict=True)}
        at_values = [(pos, v) for pos, v in found if v in value_set]  # the year's left out
        concluded = evidence_conclusion(named, at_values, own)
        if concluded is not None:
            return concluded == best
        # claim first: the higher entity named first, and the first value is its own
        return bool(named) and named[0][1] == best and at_values[0][1] == float(max(values))

    def reference_answer(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """The value, or the comparison with both values."""
        spec = ALL_SPECS[instance.data["spec"]]
        q = spec["quantity"]
        rows = [results[i] for i in range(len(instance.expected_calls))]
        if instance.level < 3:
            return f"It is {rows[0][q]} {spec['unit']}."
        id_arg = f"{spec['kind']}_id"
        if self.answer_style == "evidence":
            listed = ", ".join(f"{r[id_arg]} {r[q]} {spec['unit']}" for r in rows)
            top = max(rows, key=lambda r: r[q])
            return f"{listed}: {top[id_arg]} is higher."
        rows.sort(key=lambda r: r[q], reverse=True)
        return f"{rows[0][id_arg]} is higher: {rows[0][q]} vs {rows[1][q]} ({rows[1][id_arg]})."

    def process_layers(self, instance: TaskInstance, call_log: list[dict]) -> dict[str, float]:
        """``progress``: the needed tool was used successfully; ``reask``: duplicates."""
        used = any(e["ok"] and e["name"] == instance.data["spec"] for e in call_log)
        return {"progress": float(used), "reask": float(duplicate_results(call_log))}


class DynamicEnv(ShapedTaskEnv):
    """A ``ShapedTaskEnv`` whose tool schemas are refreshed at every ``reset``."""

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list, dict[str, Any]]:
        """Draw the instance first, then expose its tools (see ``ToolTaskEnv.reset``)."""
        seed, instance = self.draw_instance(seed, options)
        self.family_schemas = ToolRegistry(self.family.tools(instance)).schemas()
        return super().reset(seed=seed, options={"instance": instance})


def make_dynamic(**kwargs: Any) -> ToolTaskEnv:
    """``make("dynamic", pool=..., split=..., max_turns=...)``."""
    env_kwargs = split_env_kwargs(kwargs)
    return DynamicEnv(DynamicToolsFamily(**kwargs), **env_kwargs)
