"""A synthetic corpus of generic tool-use conversations for pretraining the tiny model.

Tools are made up combinatorially (``lookup_price(item)``, ``find_book(title, year)``, ...),
entity names are random syllable words, codes and numbers, so the model cannot memorise
values: it must learn to pick the tool named in the request, copy argument values from the
user text, and restate values from tool responses. No weather tools, no tool errors (those
are left for RL). Everything is a pure function of a ``random.Random``.
"""

from __future__ import annotations

import json
import random
from typing import Any

from agentrl.chat.template import IM_END, IM_START
from agentrl.tiny.vocab import CITIES, ENGLISH
from agentrl.types import Message

VERBS = ("get", "lookup", "find", "check", "fetch", "query")
NOUNS = (
    "price", "stock", "book", "flight", "score", "rating", "balance", "order", "movie", "song",
    "planet", "team", "recipe", "car", "hotel", "device", "course", "package", "album", "player",
    "product", "station", "market", "account", "river", "island", "robot", "garden", "ticket",
)  # fmt: skip
KEYS = ("item", "symbol", "title", "name", "code", "id", "key", "label")
EXTRA_PARAMS = (("year", "integer"), ("region", "string"), ("limit", "integer"),
                ("size", "integer"), ("color", "string"), ("mode", "string"))  # fmt: skip
NUM_FIELDS = ("value", "count", "total", "level", "rank", "amount", "length", "weight",
              "age", "speed", "height", "cost", "rate", "points", "units", "depth")  # fmt: skip
STR_FIELDS = ("status", "owner", "color", "kind", "group", "region")
SYLLABLES = ("ka", "lo", "mi", "ru", "ze", "ta", "no", "vi", "sa", "de", "po", "li", "gu", "be",
             "ra", "xo", "fi", "me", "du", "ne", "zor", "bal", "kin", "tor", "mel")  # fmt: skip
#: Share of conversations without tool use (mostly short copy drills).
PLAIN_FRACTION = 0.3
COMMON_WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from "
    "or one had by word but not what all were we when your can said there use an each which "
    "she do how their if will up other about out many then them these so some her would make "
    "like him into time has look two more write go see number no way could people my than "
    "first water been call who oil its now find long down day did get come made may part "
    "hello thanks please sure here okay yes answer question help result data value name"
)  # a few common English words for the BPE


REAL_WORDS: tuple[str, ...] = tuple(ENGLISH.split() + CITIES.split())


def word(rng: random.Random) -> str:
    """A word: half the time a made-up one of 2-3 syllables, else a real English word or city.

    Real words train the embeddings of everyday vocabulary (as any pretrained LLM has seen
    it); made-up ones force copying rather than recall.
    """
    if rng.random() < 0.5:
        return rng.choice(REAL_WORDS)
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))


def _value(rng: random.Random, key: str, typ: str) -> Any:
    """A random argument value for parameter ``key`` of JSON type ``typ``."""
    if typ == "integer":
        return rng.randint(1900, 2030) if key == "year" else rng.randint(1, 999)
    if key in ("symbol", "code"):
        letters = "".join(rng.choice("ABCDEFGHKLMNPRSTVXZ") for _ in range(rng.randint(2, 4)))
        return (
            letters if key == "symbol" or rng.random() < 0.5 else f"{letters}{rng.randint(1, 99)}"
        )
    if key == "title":
        return " ".join(word(rng).capitalize() for _ in range(rng.randint(1, 2)))
    if key == "name":
        return word(rng).capitalize()
    return word(rng)


def make_tool(rng: random.Random, noun: str) -> dict[str, Any]:
    """A made-up tool for ``noun``: 1-3 typed params, a response spec with 2-3 fields."""
    verb = rng.choice(VERBS)
    key = rng.choice(KEYS)
    key_type = "integer" if key == "id" else "string"
    params = [(key, key_type)] + rng.sample(EXTRA_PARAMS, rng.choice((0, 0, 1, 2)))
    fields = rng.sample(NUM_FIELDS, rng.randint(1, 2)) + rng.sample(STR_FIELDS, rng.randint(0, 1))
    rng.shuffle(fields)
    schema = {
        "type": "function",
        "function": {
            "name": f"{verb}_{noun}",
            "description": f"{verb.capitalize()} a {noun} by {key}.",
            "parameters": {
                "type": "object",
                "properties": {p: {"type": t} for p, t in params},
                "required": [p for p, _ in params],
            },
        },
    }
    return {"schema": schema, "noun": noun, "params": params, "fields": fields}


def _call(tool: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    name = tool["schema"]["function"]["name"]
    return {"type": "function", "function": {"name": name, "arguments": args}}


def _response(rng: random.Random, tool: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    key = tool["params"][0][0]
    out: dict[str, Any] = {key: args[key]} if rng.random() < 0.5 else {}
    for f in tool["fields"]:
        out[f] = word(rng) if f in STR_FIELDS else rng.randint(0, 9999)
    return out


def _describe(tool: dict[str, Any], args: dict[str, Any]) -> str:
    """How a user names one entity: ``book Kalo Mirun`` or ``book Kalo Mirun (year 1987)``."""
    key = tool["params"][0][0]
    extra = ", ".join(f"{p} {args[p]}" for p, _ in tool["params"][1:])
    text = f"{tool['noun']} {args[key]}"
    return f"{text} ({extra})" if extra else text


def _restate(
    tool: dict[str, Any], args: dict[str, Any], resp: dict[str, Any], field: str | None
) -> str:
    key_val = args[tool["params"][0][0]]
    if field is not None:
        return f"the {field} of {tool['noun']} {key_val} is {resp[field]}"
    parts = ", ".join(f"{f} {resp[f]}" for f in tool["fields"])
    return f"{tool['noun']} {key_val} has {parts}"


def _plain_chat(rng: random.Random) -> list[Message]:
    """A conversation with no tool use."""
    w = word(rng)
    n = rng.randint(0, 999)
    pairs = [
        ("Hello!", "Hello! How can I help you?"),
        (f"Repeat the word {w}.", w),
        (f"Say {w} twice.", f"{w} {w}"),
        (f"What number comes after {n}?", f"{n + 1}"),
        ("Who are you?", "I am a helpful assistant."),
        (f"Spell {w}.", " ".join(w)),
        ("Thanks!", "You are welcome."),
    ]
    if rng.random() < 0.7:  # copy drills: cheap, short, and they teach induction (copying)
        items = [
            _value(rng, rng.choice(KEYS), rng.choice(("string", "integer")))
            for _ in range(rng.randint(1, 4))
        ]
        text = " ".join(str(x) for x in items)
        q = rng.choice(("Repeat after me: {t}", "Copy this: {t}", "Say exactly: {t}")).format(
            t=text
        )
        pairs = [(q, text)]
    q, a = rng.choice(pairs)
    return [{"role": "user", "content": q}, {"role": "assistant", "content": a}]


def sample_conversation(rng: random.Random) -> tuple[list[Message], list[dict[str, Any]] | None]:
    """One synthetic (messages, tools) example."""
    n_tools = rng.choice((1, 1, 2, 2, 3))
    tools = [make_tool(rng, noun) for noun in rng.sample(NOUNS, n_tools)]
    schemas = [t["schema"] for t in tools]
    kind = rng.random()
    if kind < PLAIN_FRACTION:
        return _plain_chat(rng), (schemas if rng.random() < 0.2 else None)
    tool = rng.choice(tools)
    n_ent = 1 if kind < PLAIN_FRACTION + 0.45 else rng.choice((2, 2, 3))
    args_list = []
    for _ in range(n_ent):
        args_list.append({p: _value(rng, p, t) for p, t in tool["params"]})
    num_fields = [f for f in tool["fields"] if f not in STR_FIELDS]
    field = rng.choice(num_fields) if rng.random() < 0.7 else None
    compare = n_ent > 1 and field is not None and rng.random() < 0.5
    ents = [_describe(tool, a) for a in args_list]
    joined = ents[0] if n_ent == 1 else ", ".join(ents[:-1]) + " and " + ents[-1]
    if compare:
        big = rng.random() < 0.5
        user = f"Which has the {'larger' if big else 'smaller'} {field}: {' or '.join(ents)}?"
    elif field is not None:
        user = rng.choice(("What is the {f} of {e}?", "Tell me the {f} of {e}.",
                           "I need the {f} of {e}."))  # fmt: skip
        user = user.format(f=field, e=joined)
    else:
        user = rng.choice(("Look up {e}.", "Can you check {e}?", "Find {e} for me."))
        user = user.format(e=joined)
    msgs: list[Message] = [{"role": "user", "content": user}]
    parallel = n_ent > 1 and rng.random() < 0.2
    resps = [_response(rng, tool, a) for a in args_list]
    if parallel:
        msgs.append({"role": "assistant", "content": "",
                     "tool_calls": [_call(tool, a) for a in args_list]})  # fmt: skip
        msgs += [{"role": "tool", "content": json.dumps(r)} for r in resps]
    else:
        for a, r in zip(args_list, resps, strict=True):
            msgs.append({"role": "assistant", "content": "", "tool_calls": [_call(tool, a)]})
            msgs.append({"role": "tool", "content": json.dumps(r)})
    if compare:
        keyp = tool["params"][0][0]
        vals = [r[field] for r in resps]
        best = (max if big else min)(range(n_ent), key=lambda i: vals[i])
        listed = ", ".join(f"{args_list[i][keyp]} {vals[i]}" for i in range(n_ent))
        answer = f"{tool['noun'].capitalize()} {args_list[best][keyp]} has the " \
                 f"{'larger' if big else 'smaller'} {field} ({listed})."  # fmt: skip
    else:
        facts = [_restate(tool, a, r, field) for a, r in zip(args_list, resps, strict=True)]
        answer = "; ".join(facts)
        answer = answer[0].upper() + answer[1:] + "."
    msgs.append({"role": "assistant", "content": answer})
    return msgs, schemas


def copy_drill(rng: random.Random) -> list[Message]:
    """A short "repeat after me" chat: 2-5 made-up words, names and numbers to copy exactly.

    Cheap to train on, and what a small transformer needs to form induction (copy) heads
    before it can copy arguments into tool calls and values into answers.
    """
    parts = []
    for _ in range(rng.randint(2, 5)):
        c = rng.random()
        parts.append(word(rng) if c < 0.4 else str(rng.randint(-20, 999)) if c < 0.7
                     else word(rng).capitalize())  # fmt: skip
    text = " ".join(parts)
    q = rng.choice(("Repeat: {t}", "Repeat after me: {t}", "Copy this: {t}", "Say exactly: {t}"))
    return [{"role": "user", "content": q.format(t=text)},
            {"role": "assistant", "content": text}]  # fmt: skip


def make_drills(n: int, seed: int = 0) -> list[list[Message]]:
    """``n`` copy drills, a pure function of ``seed``."""
    rng = random.Random(seed)
    return [copy_drill(rng) for _ in range(n)]


def drill_text(messages: list[Message]) -> tuple[str, str]:
    """(prompt, answer) text of a drill in the chat format but with no system turn.

    Measured on the tiny model: a fixed system prefix slows the forming of copy heads several
    times over, so the drills that teach copying leave it out.
    """
    user, answer = messages[0]["content"], messages[1]["content"]
    return (f"{IM_START}user\n{user}{IM_END}\n{IM_START}assistant\n",
            f"{answer}{IM_END}")  # fmt: skip


def make_corpus(n: int, seed: int = 0) -> list[tuple[list[Message], list[dict[str, Any]] | None]]:
    """``n`` synthetic conversations, deterministic in ``seed``."""
    rng = random.Random(seed)
    return [sample_conversation(rng) for _ in range(n)]
