"""Shop: a WebShop-like store over a generated catalogue (curriculum stage 2, ``make("shop")``).

Each instance draws a catalogue of ~60 items (brand, colour, category, sizes, price) and a
shopper's request that exactly one item satisfies. Tools: ``search(query)``,
``filter_results(size, color, max_price)`` (filters the last search), ``view_item(item_id)``,
``add_to_cart(item_id, size, quantity)``, ``checkout()`` and ``ask_user(question)``.

Levels: 0 = a decomposed sub-task (look up one item's price); 1 = buy a colour + category in a
size; 2 = the same under a budget, with decoys failing the size or the price; 3 = the size is
not given: ask the user (asking again for anything already known is penalized).

Verifier: level 0 - the answer states the item's price and no other number; levels 1-3 - the
last checkout holds exactly the target item, in the wanted size, quantity 1.
Process layers: ``progress`` (target found by a search, kept by a filter on the size and budget,
viewed, in the cart, checked out) and ``reask`` (repeated information, re-asked questions).
"""

from __future__ import annotations

import random
import re
from typing import Any

from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.envs.tasks.shaped import duplicate_results
from agentrl.envs.tasks.shop_tools import build_tools
from agentrl.tools.registry import Tool
from agentrl.types import ToolCall

CATEGORIES = ("shirt", "jeans", "sneakers", "jacket", "dress", "hoodie", "skirt", "boots",
              "sweater", "shorts")  # fmt: skip
COLOURS = ("red", "blue", "black", "white", "green", "grey", "navy", "beige", "pink", "yellow")
BRANDS = ("Acme", "Northwind", "Zephyr", "Lumen", "Orbit", "Kite", "Tundra", "Vela")
LETTER_SIZES = ("XS", "S", "M", "L", "XL")
SHOE_SIZES = ("38", "39", "40", "41", "42", "43", "44")
SYSTEM_PROMPT = "You are a shopping assistant. Use the store's tools to find and buy items."
MAX_ANSWER_CHARS = 500
_NUMBER_RE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")


def sizes_for(category: str) -> tuple[str, ...]:
    """Shoe sizes for footwear, letter sizes for the rest."""
    return SHOE_SIZES if category in ("sneakers", "boots") else LETTER_SIZES


def _item(rng: random.Random, idx: int, **fixed: Any) -> dict[str, Any]:
    category = fixed.get("category") or rng.choice(CATEGORIES)
    all_sizes = sizes_for(category)
    item = {
        "id": f"P{1000 + idx}",
        "brand": rng.choice(BRANDS),
        "color": rng.choice(COLOURS),
        "category": category,
        "sizes": sorted(rng.sample(all_sizes, rng.randint(2, len(all_sizes))), key=all_sizes.index),
        "price": round(rng.randint(15, 150) - 0.01, 2),
    }
    item.update({k: v for k, v in fixed.items() if v is not None})
    item["title"] = f"{item['brand']} {item['color']} {item['category']}"
    return item


def matches(item: dict, want: dict) -> bool:
    """Does ``item`` satisfy the request ``want`` (colour, category, size, budget)?"""
    return (
        item["category"] == want["category"]
        and item["color"] == want["color"]
        and want["size"] in item["sizes"]
        and (want.get("budget") is None or item["price"] <= want["budget"])
    )


def sample_catalogue(rng: random.Random, level: int) -> tuple[list[dict], dict, dict]:
    """(catalogue, target item, request) with exactly one item matching the request."""
    items = [_item(rng, i) for i in range(56)]
    target = items[rng.randrange(len(items))]
    size = rng.choice(target["sizes"])
    budget = None
    if level >= 2:
        budget = int(target["price"]) + rng.randint(1, 20)
    want = {"category": target["category"], "color": target["color"], "size": size,
            "budget": budget, "brand": target["brand"]}  # fmt: skip
    others = [s for s in sizes_for(target["category"]) if s != size]
    decoys = [_item(rng, 56, category=target["category"], color=target["color"], sizes=others)]
    if level >= 2:  # the right size but over budget
        price = round(budget + rng.randint(5, 60) - 0.01, 2)
        same = {"category": target["category"], "color": target["color"]}
        decoys.append(_item(rng, 57, sizes=[size], price=price, **same))
    items += decoys
    for it in items:
        same_title = it["title"] == target["title"]
        while it is not target and (matches(it, want) or (level == 0 and same_title)):
            it["color"] = rng.choice([c for c in COLOURS if c != target["color"]])
            it["title"] = f"{it['brand']} {it['color']} {it['category']}"
            same_title = False
    rng.shuffle(items)
    return items, target, want


class ShopFamily(TaskFamily):
    """Find, filter, view, add to cart and check out the one item matching a request."""

    name = "shop"
    levels = (0, 1, 2, 3)
    system_prompt = SYSTEM_PROMPT

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        """A catalogue, the request, and the reference call sequence."""
        items, target, want = sample_catalogue(rng, level)
        task_id = f"shop-L{level}-{rng.getrandbits(32):08x}"
        data: dict[str, Any] = {"catalogue": items, "target": target["id"], "want": want}
        if level == 0:
            prompt = f"How much does the {target['title']} cost?"
            calls = [ToolCall("search", {"query": target["title"]}),
                     ToolCall("view_item", {"item_id": target["id"]})]  # fmt: skip
            return TaskInstance(task_id, level, prompt, {**data, "stages": [0, 1]}, calls)
        thing = f"a {want['color']} {want['category']}"
        budget = f" under ${want['budget']:g}" if want["budget"] is not None else ""
        if level == 3:
            prompt = f"Buy me {thing}{budget}, in my usual size."
        else:
            prompt = f"Buy me {thing} in size {want['size']}{budget}."
        flt: dict[str, Any] = {"size": want["size"], "color": want["color"]}
        if want["budget"] is not None:
            flt["max_price"] = want["budget"]
        calls = [ToolCall("search", {"query": f"{want['color']} {want['category']}"})]
        stages = [0]
        if level == 3:
            calls.append(ToolCall("ask_user", {"question": "What is your size?"}))
            stages.append(0)
        calls += [
            ToolCall("filter_results", flt),
            ToolCall("view_item", {"item_id": target["id"]}),
            ToolCall("add_to_cart", {"item_id": target["id"], "size": want["size"], "quantity": 1}),
            ToolCall("checkout", {}),
        ]
        stages += [1, 2, 3, 4]
        return TaskInstance(task_id, level, prompt, {**data, "stages": stages}, calls)

    def tools(self, instance: TaskInstance) -> list[Tool]:
        """The store's tools, bound to a fresh session (cart, orders, last results)."""
        state = {"results": [], "cart": [], "orders": [], "asked": []}
        instance.data["session"] = state
        known = set() if instance.level < 3 else {"size"}
        return build_tools(instance.data["catalogue"], instance.data["want"], state, known)

    def check_answer(self, instance: TaskInstance, answer: str) -> bool:
        """The rule-based verifier (see the module docstring)."""
        if not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
            return False
        target = next(i for i in instance.data["catalogue"] if i["id"] == instance.data["target"])
        if instance.level == 0:
            numbers = {float(n) for n in _NUMBER_RE.findall(answer)}
            return numbers == {target["price"]}
        orders = instance.data.get("session", {}).get("orders") or []
        want = {"item_id": target["id"], "size": instance.data["want"]["size"], "quantity": 1}
        return bool(orders) and orders[-1]["items"] == [want]

    def reference_answer(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """Level 0: the price; otherwise the order confirmation."""
        if instance.level == 0:
            item = results[1]
            return f"The {item['title']} costs ${item['price']}."
        order = results[len(instance.expected_calls) - 1]
        return f"Done: order {order['order_id']} placed, total ${order['total']}."

    def process_layers(self, instance: TaskInstance, call_log: list[dict]) -> dict[str, float]:
        """``progress``: fraction of milestones; ``reask``: known information asked again."""
        session = instance.data.get("session", {})
        target, want = instance.data["target"], instance.data["want"]
        ok = [e for e in call_log if e["ok"]]
        found = any(e["name"] == "search" and target in e["content"] for e in ok)
        viewed = any(
            e["name"] == "view_item" and e["arguments"].get("item_id") == target for e in ok
        )
        if instance.level == 0:
            steps = [found, viewed]
        else:
            filtered = any(
                e["name"] == "filter_results" and target in e["content"]
                and str(e["arguments"].get("size", "")).upper() == want["size"]
                and (want["budget"] is None or e["arguments"].get("max_price") is not None)
                for e in ok
            )  # fmt: skip
            in_cart = any(
                e["name"] == "add_to_cart" and e["arguments"].get("item_id") == target
                and e["arguments"].get("size") == want["size"] for e in ok
            )  # fmt: skip
            steps = [found, filtered, viewed, in_cart, self.check_answer(instance, "done")]
            if instance.level == 3:
                steps.append("size" in session.get("asked", []))
        reasks = duplicate_results(call_log, ignore=("ask_user",)) + session.get("reasks", 0)
        return {"progress": sum(steps) / len(steps), "reask": float(reasks)}
