"""Weather: the demo task family (``make("weather")``).

Each instance draws a small world (temperature and condition of ~50 real cities, plus a local
time) from the episode's rng. Tools: ``get_weather(city)`` and a distractor
``get_local_time(city)``. ``get_weather`` fails transiently with probability ``fault_rate``
(``{"error": "unavailable", ...}``); a retry eventually succeeds: at most ``max_faults``
faults per episode (default 2, so the reference solver fits ``max_turns=6`` at level 3).

Levels: 1 = the weather in one city; 2 = which of two cities is warmer; 3 = which of three
is warmest / coldest. Temperatures of the asked cities never tie.

Verifier (``check_answer``): numbers are read from the answer (``21°C`` -> 21); every number
must be an asked city's temperature in °C (or its °F equivalent), which stops listing guesses.
Level 1: the temperature appears and the only condition named is the right one. Levels 2 and
3: the first asked city named is the warmer / warmest / coldest one and every asked city's
temperature appears (so the answer rests on all the lookups: with only the target's
temperature required, GRPO learned to look up one city of three, call it the warmest and be
right a third of the time), and the first number is that city's own temperature (°C or °F),
so "Lima is warmer: 12°C vs 20°C in Oslo" after Lima 20, Oslo 12 fails. An answer may also
give the evidence first and conclude last ("Oslo 12°C, Lima 20°C: Lima is warmer."): when
each asked city's first mention is followed by its own temperature, before any other city,
and a city is named again after every number, the first city named there is the answer and
must be the target (so a list in the asked order cannot pass on a wrong conclusion, nor "..:
Oslo is warmer than Lima" on its last name). Otherwise the answer
must make a comparison (warmer, warmest, colder, coldest, hotter, higher, ...): a bare list of
the temperatures in the asked order claims nothing, yet named the target first a third of the
time at level 3 (and half at level 2) and passed, until 2026-12-06. Answers over 500
characters fail.

``progress_reward`` (off by default) adds the process layers of the other families: ``progress``,
the share of the asked cities whose weather was fetched (a fault is not a fetch), and
``reask``. Without it a call answered "busy, try again" counts as made (``arguments`` is the
share of the expected calls made), so a failed answer after an unretried fault scores what one
after every lookup scores, and GRPO on the real model learned to answer instead of retrying
(bench/README.md, weather).

``answer_style`` picks the reference solver's form (its demonstrations teach it): "claim"
(the default: the city first) or "evidence" (the temperatures first, then the city: a small
model compares numbers it has just written instead of naming a city before any number).
"""

from __future__ import annotations

import random
import re
from typing import Any

from agentrl.envs.reference import successful_results
from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.envs.tasks.answers import evidence_conclusion as conclusion_of
from agentrl.envs.tasks.names import name_resolver
from agentrl.envs.tasks.shaped import duplicate_results
from agentrl.tools.registry import Tool, tool
from agentrl.types import ToolCall

CITIES: tuple[str, ...] = (
    "Paris", "London", "Berlin", "Madrid", "Rome", "Lisbon", "Dublin", "Vienna", "Prague",
    "Warsaw", "Athens", "Oslo", "Stockholm", "Helsinki", "Copenhagen", "Amsterdam", "Zurich",
    "Moscow", "Istanbul", "Cairo", "Nairobi", "Lagos", "Cape Town", "Dubai", "Tel Aviv",
    "New Delhi", "Mumbai", "Bangkok", "Singapore", "Kuala Lumpur", "Jakarta", "Manila",
    "Hong Kong", "Beijing", "Shanghai", "Seoul", "Tokyo", "Sydney", "Melbourne", "Auckland",
    "New York", "Los Angeles", "San Francisco", "Chicago", "Toronto", "Vancouver",
    "Mexico City", "Lima", "Santiago", "Buenos Aires", "Rio de Janeiro", "Reykjavik",
)  # fmt: skip
CONDITIONS: tuple[str, ...] = ("sunny", "cloudy", "rainy", "snowy", "windy", "foggy")
CONDITION_WORDS: dict[str, tuple[str, ...]] = {
    "sunny": ("sunny", "sun", "sunshine"),
    "cloudy": ("cloudy", "cloud", "clouds", "overcast"),
    "rainy": ("rainy", "rain", "raining"),
    "snowy": ("snowy", "snow", "snowing"),
    "windy": ("windy", "wind"),
    "foggy": ("foggy", "fog"),
}
TEMP_RANGE = (-10, 38)
MAX_ANSWER_CHARS = 500
SYSTEM_PROMPT = "You are a weather assistant. Use the tools, then answer in one short sentence."
FAULT = {"error": "unavailable", "message": "Weather service busy, try again."}
PROMPTS: dict[int, tuple[str, ...]] = {
    1: (
        "What's the weather in {a}?",
        "How is the weather in {a} right now?",
        "Tell me the current weather in {a}.",
    ),
    2: (
        "Which is warmer, {a} or {b}?",
        "Is it warmer in {a} or in {b} right now?",
        "Which city is warmer today: {a} or {b}?",
    ),
    3: (
        "Which city is the {sup}: {a}, {b} or {c}?",
        "Of {a}, {b} and {c}, which is the {sup} right now?",
        "Where is it {sup} today: {a}, {b} or {c}?",
    ),
}
ANSWER_STYLES = ("claim", "evidence")
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")


def numbers_at(text: str) -> list[tuple[int, float]]:
    """(position, value) of each number in ``text`` in order (a Unicode minus is a sign)."""
    return [(m.start(), float(m.group())) for m in _NUMBER_RE.finditer(text.replace("\u2212", "-"))]


def mentioned_numbers(text: str) -> list[float]:
    """Numbers in ``text`` in order (a Unicode minus counts as a sign)."""
    return [value for _, value in numbers_at(text)]


_CLAIM_RE = re.compile(r"(?<!\w)(?:warm|hott?|cold|cool|high|low)(?:er|est)(?!\w)", re.I)


def makes_a_claim(answer: str) -> bool:
    """Whether ``answer`` compares (warmer, warmest, coldest, hotter, lower, ...)."""
    return _CLAIM_RE.search(answer) is not None


def _word_re(phrase: str) -> re.Pattern[str]:
    words = r"\s+".join(re.escape(w) for w in phrase.casefold().split())
    return re.compile(rf"(?<!\w){words}(?!\w)")


def first_mentioned(text: str, names: list[str]) -> str | None:
    """The name among ``names`` that appears first in ``text`` (case-insensitive, whole words)."""
    folded = text.casefold()
    found = [(m.start(), n) for n in names if (m := _word_re(n).search(folded))]
    return min(found)[1] if found else None


def mentions(text: str, names: list[str]) -> list[tuple[int, str]]:
    """Every whole-word mention of ``names`` in ``text`` as (position, name), in text order."""
    folded = text.casefold()
    return sorted((m.start(), n) for n in names for m in _word_re(n).finditer(folded))


def evidence_conclusion(answer: str, temps: dict[str, int]) -> str | None:
    """The city an evidence-first answer concludes with, or None if it has another shape
    (``agentrl.envs.tasks.answers``; a city's own evidence is its temperature in °C or °F)."""
    folded = answer.casefold()  # ``mentions`` gives positions in the casefolded text
    own = {city: allowed_numbers([t]) for city, t in temps.items()}
    return conclusion_of(mentions(answer, list(temps)), numbers_at(folded), own)


def mentioned_conditions(text: str) -> set[str]:
    """The weather conditions ``text`` names (synonyms such as "rain" count)."""
    folded = text.casefold()
    return {
        c for c, words in CONDITION_WORDS.items() if any(_word_re(w).search(folded) for w in words)
    }


def allowed_numbers(temps: list[int]) -> set[float]:
    """Numbers an answer may contain: the temperatures in °C and their rounded °F."""
    return {float(t) for t in temps} | {float(round(t * 9 / 5 + 32)) for t in temps}


class WeatherFamily(TaskFamily):
    """Weather lookups and comparisons over a seeded world, with transient service faults."""

    name = "weather"
    levels = (1, 2, 3)
    system_prompt = SYSTEM_PROMPT

    def __init__(
        self, fault_rate: float = 0.2, max_faults: int = 2, answer_style: str = "claim",
        progress_reward: bool = False,
    ) -> None:  # fmt: skip
        if answer_style not in ANSWER_STYLES:
            raise ValueError(f"answer_style must be one of {ANSWER_STYLES}, got {answer_style!r}")
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be in [0, 1], got {fault_rate!r}")
        if max_faults < 0:
            raise ValueError(f"max_faults must be >= 0, got {max_faults!r}")
        self.fault_rate = fault_rate
        self.max_faults = max_faults
        self.answer_style = answer_style
        self.progress_reward = progress_reward

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        """A world, the asked cities (distinct temperatures) and a phrasing, all from ``rng``."""
        world = {
            city: {
                "temperature_c": rng.randint(*TEMP_RANGE),
                "condition": rng.choice(CONDITIONS),
                "time": f"{rng.randrange(24):02d}:{rng.randrange(60):02d}",
            }
            for city in CITIES
        }
        cities = rng.sample(CITIES, level)
        seen: set[int] = set()
        for c in cities:  # no ties among the asked cities
            while world[c]["temperature_c"] in seen:
                world[c]["temperature_c"] = rng.randint(*TEMP_RANGE)
            seen.add(world[c]["temperature_c"])
        sup = rng.choice(("warmest", "coldest")) if level == 3 else "warmer"
        template = rng.choice(PROMPTS[level])
        prompt = template.format(sup=sup, **dict(zip("abc", cities, strict=False)))
        temps = {c: world[c]["temperature_c"] for c in cities}
        target = min(cities, key=temps.get) if sup == "coldest" else max(cities, key=temps.get)
        return TaskInstance(
            task_id=f"weather-L{level}-{rng.getrandbits(32):08x}",
            level=level,
            prompt=prompt,
            data={
                "world": world,
                "cities": cities,
                "target": target,
                "superlative": sup,
                "fault_seed": rng.getrandbits(32),
            },
            expected_calls=[ToolCall("get_weather", {"city": c}) for c in cities],
        )

    def tools(self, instance: TaskInstance) -> list[Tool]:
        """``get_weather`` (with seeded transient faults) and ``get_local_time``."""
        world = instance.data["world"]
        find = name_resolver(world, "Unknown city {name!r}.")
        faults = random.Random(instance.data["fault_seed"])
        state = {"faults": 0, "streak": dict.fromkeys(world, 0)}

        @tool
        def get_weather(city: str) -> dict:
            """Current temperature (Celsius) and condition in a city.

            Args:
                city: City name, e.g. "Paris".
            """
            name = find(city)
            if (
                state["faults"] < self.max_faults
                and state["streak"][name] < 2
                and faults.random() < self.fault_rate
            ):
                state["faults"] += 1
                state["streak"][name] += 1
                return dict(FAULT)
            state["streak"][name] = 0
            w = world[name]
            return {"city": name, "temperature_c": w["temperature_c"], "condition": w["condition"]}

        @tool
        def get_local_time(city: str) -> dict:
            """Local time (HH:MM) in a city.

            Args:
                city: City name.
            """
            name = find(city)
            return {"city": name, "time": world[name]["time"]}

        return [get_weather, get_local_time]

    def process_layers(self, instance: TaskInstance, call_log: list[dict]) -> dict[str, float]:
        """With ``progress_reward``: ``progress``, the share of asked cities looked up with a
        result (not a fault), and ``reask``; else none (the plain layered reward)."""
        if not self.progress_reward:
            return {}
        expected = instance.expected_calls
        made = len(successful_results(expected, call_log))
        return {"progress": made / len(expected), "reask": float(duplicate_results(call_log))}

    def check_answer(self, instance: TaskInstance, answer: str) -> bool:
        """The rule-based verifier (see the module docstring)."""
        if not answer or len(answer) > MAX_ANSWER_CHARS:
            return False
        world, cities = instance.data["world"], instance.data["cities"]
        temps = [world[c]["temperature_c"] for c in cities]
        numbers = mentioned_numbers(answer)
        if not set(numbers) <= allowed_numbers(temps):
            return False
        if instance.level == 1:
            condition = world[cities[0]]["condition"]
            return temps[0] in numbers and mentioned_conditions(answer) == {condition}
        target = instance.data["target"]
        if not all(t in numbers for t in temps):
            return False
        concluded = evidence_conclusion(answer, dict(zip(cities, temps, strict=True)))
        if concluded is not None:
            return concluded == target
        if not makes_a_claim(answer) or first_mentioned(answer, cities) != target:
            return False
        own = world[target]["temperature_c"]
        # the named city paired with another city's temperature fails
        return not numbers[:1] or numbers[0] in allowed_numbers([own])

    def reference_answer(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """One sentence from the ``get_weather`` results (``results[i]`` for city ``i``)."""
        rows = [results[i] for i in range(len(instance.expected_calls))]
        if instance.level == 1:
            r = rows[0]
            return f"It is {r['temperature_c']}°C and {r['condition']} in {r['city']}."
        sup = instance.data["superlative"]
        if self.answer_style == "evidence":
            listed = ", ".join(f"{r['city']} {r['temperature_c']}°C" for r in rows)
            top = instance.data["target"]
            return f"{listed}: {top} is {'warmer' if instance.level == 2 else 'the ' + sup}."
        rows.sort(key=lambda r: r["temperature_c"], reverse=sup != "coldest")
        top, rest = rows[0], rows[1:]
        if instance.level == 2:
            low = rest[0]
            return (
                f"{top['city']} is warmer: {top['temperature_c']}°C vs "
                f"{low['temperature_c']}°C in {low['city']}."
            )
        others = ", ".join(f"{r['city']} {r['temperature_c']}°C" for r in rest)
        return f"{top['city']} is the {sup}: {top['temperature_c']}°C ({others})."
