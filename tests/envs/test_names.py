"""The shared name resolver of the weather, meeting and shop tools."""

from __future__ import annotations

import pytest
from envhelpers import call

import agentrl.envs as envs
from agentrl.envs.tasks.names import name_key, name_resolver
from agentrl.envs.tasks.shop_tools import build_tools as shop_tools


def test_name_key_folds_case_and_whitespace():
    assert name_key("  New \t  YORK ") == "new york"
    assert name_key(42) == "42"


def test_resolver_gives_the_world_spelling_or_a_readable_error():
    resolve = name_resolver(["New York", "Paris"], "Unknown city {name!r}; known: {known}.")
    assert resolve(" new   york") == "New York"
    assert resolve("PARIS") == "Paris"
    with pytest.raises(ValueError) as err:
        resolve("Atlantis")
    assert str(err.value) == "Unknown city 'Atlantis'; known: New York, Paris."
    with pytest.raises(ValueError, match=r"^Unknown city 7; known"):
        resolve(7)  # the raw value, as the model wrote it


def step_call(env, name: str, **arguments) -> dict:
    """The one tool-call record of a turn that makes ``name(**arguments)``."""
    return env.step(call(name, **arguments))[4]["tool_calls"][0]


def test_weather_tools_resolve_through_it():
    env = envs.make("weather", fault_rate=0.0)
    env.reset(seed=0, options={"level": 1})
    found = step_call(env, "get_local_time", city=" new   YORK ")
    assert found["ok"] and '"city": "New York"' in found["content"]
    missing = step_call(env, "get_weather", city="Oz")
    assert not missing["ok"] and "Unknown city 'Oz'." in missing["content"]


def test_meeting_tools_resolve_through_it():
    env = envs.make("meeting")
    env.reset(seed=0, options={"level": 1})
    people = list(env.instance.data["world"]["people"])
    found = step_call(env, "get_timezone", person=f"  {people[0].upper()} ")
    assert found["ok"] and f'"person": "{people[0]}"' in found["content"]
    missing = step_call(env, "get_timezone", person="Nobody")
    assert f"Unknown person 'Nobody'; known: {', '.join(people)}." in missing["content"]


def test_shop_items_resolve_by_id_in_any_case():
    item = {"id": "P1001", "title": "Acme red shirt", "brand": "Acme", "color": "red",
            "category": "shirt", "sizes": ["M"], "price": 9.99}  # fmt: skip
    session = {"results": [], "cart": [], "orders": [], "asked": []}
    tools = {t.name: t for t in shop_tools([item], {"size": "M"}, session, set())}
    assert tools["view_item"].fn(item_id=" p1001 ")["id"] == "P1001"
    with pytest.raises(ValueError, match=r"^No item with id 'P9'\.$"):
        tools["view_item"].fn(item_id="P9")
