"""The shop family's tools, bound to one catalogue and session (see ``shop.py``)."""

from __future__ import annotations

import re

from agentrl.envs.tasks.names import name_resolver
from agentrl.tools.registry import Tool, tool

_TOPICS = {
    "size": ("size", "fit"),
    "color": ("colour", "color"),
    "budget": ("price", "budget", "cost", "spend", "much"),
    "category": ("kind", "type", "item", "category", "looking"),
}


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", str(text).casefold()))


def _row(item: dict) -> dict:
    return {"item_id": item["id"], "title": item["title"], "price": item["price"]}


def question_topics(question: str) -> list[str]:
    """Which request attributes a question to the user asks about."""
    words = _tokens(question)
    return [t for t, keys in _TOPICS.items() if words & set(keys)]


def build_tools(catalogue: list[dict], want: dict, state: dict, hidden: set[str]) -> list[Tool]:
    """``search``, ``filter_results``, ``view_item``, ``add_to_cart``, ``checkout``, ``ask_user``.

    ``hidden`` names the request attributes the prompt left out (the user answers those once;
    asking about anything else, or twice, counts in ``state["reasks"]``).
    """
    by_id = {i["id"]: i for i in catalogue}
    resolve = name_resolver(by_id, "No item with id {name!r}.")
    state.setdefault("reasks", 0)

    def item(item_id: str) -> dict:
        return by_id[resolve(item_id)]

    return [
        *_browse_tools(catalogue, state, item),
        *_cart_tools(state, item),
        _ask_tool(want, state, hidden),
    ]


def _browse_tools(catalogue: list[dict], state: dict, item) -> list[Tool]:
    """``search``, ``filter_results``, ``view_item``."""

    @tool
    def search(query: str) -> dict:
        """Search the store; returns up to 10 items (id, title, price) best first.

        Args:
            query: Words to look for, e.g. "red jacket".
        """
        words = _tokens(query)
        scored = [(len(words & _tokens(i["title"])), i) for i in catalogue]
        hits = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]["id"]))[:10]
        state["results"] = [i for _, i in hits]
        return {"results": [_row(i) for _, i in hits]}

    @tool
    def filter_results(
        size: str | None = None, color: str | None = None, max_price: float | None = None
    ) -> dict:
        """Filter the last search's results by size, colour and maximum price.

        Args:
            size: Size that must be available, e.g. "M" or "42".
            color: Colour, e.g. "red".
            max_price: Highest acceptable price in dollars.
        """
        if not state["results"]:
            raise ValueError("Nothing to filter: call search first.")
        rows = [
            i
            for i in state["results"]
            if (size is None or str(size).strip().upper() in i["sizes"])
            and (color is None or str(color).strip().casefold() == i["color"])
            and (max_price is None or i["price"] <= float(max_price))
        ]
        return {"results": [_row(i) for i in rows]}

    @tool
    def view_item(item_id: str) -> dict:
        """Full details of an item: brand, colour, sizes in stock, price.

        Args:
            item_id: The item's id, e.g. "P1012".
        """
        i = item(item_id)
        return {k: i[k] for k in ("id", "title", "brand", "color", "category", "sizes", "price")}

    return [search, filter_results, view_item]


def _cart_tools(state: dict, item) -> list[Tool]:
    """``add_to_cart``, ``checkout``."""

    @tool
    def add_to_cart(item_id: str, size: str, quantity: int = 1) -> dict:
        """Put an item in the cart in a given size.

        Args:
            item_id: The item's id.
            size: A size the item is in stock in.
            quantity: How many.
        """
        i = item(item_id)
        size = str(size).strip().upper()
        if size not in i["sizes"]:
            raise ValueError(f"{i['id']} is not available in size {size}; sizes: {i['sizes']}.")
        if quantity < 1:
            raise ValueError("quantity must be at least 1.")
        state["cart"].append({"item_id": i["id"], "size": size, "quantity": quantity})
        return {"cart": list(state["cart"])}

    @tool
    def checkout() -> dict:
        """Buy everything in the cart; returns the order."""
        if not state["cart"]:
            raise ValueError("The cart is empty.")
        total = sum(item(c["item_id"])["price"] * c["quantity"] for c in state["cart"])
        order = {"order_id": f"O{len(state['orders']) + 1:04d}", "items": list(state["cart"]),
                 "total": round(total, 2)}  # fmt: skip
        state["orders"].append(order)
        state["cart"] = []
        return order

    return [add_to_cart, checkout]


def _ask_tool(want: dict, state: dict, hidden: set[str]) -> Tool:
    """``ask_user``: the shopper answers questions about attributes the prompt left out."""

    @tool
    def ask_user(question: str) -> dict:
        """Ask the shopper a question about what they want.

        Args:
            question: The question.
        """
        topics = question_topics(question)
        answers = []
        for t in topics:
            if t not in hidden or t in state["asked"]:
                state["reasks"] += 1
            state["asked"].append(t)
        if "size" in topics:
            answers.append(f"My size is {want['size']}.")
        if not answers:
            answers.append("I told you everything I want in my request.")
        return {"answer": " ".join(answers)}

    return ask_user
