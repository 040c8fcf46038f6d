"""Grammar-constrained tool calls (``rollout.constrained: tool_calls``), with llguidance.

An assistant turn stays free text, but once it writes ``<tool_call>`` the tokens up to
``</tool_call>`` can only spell a call of an offered tool: ``{"name": <a tool's name>,
"arguments": <an object its JSON schema accepts>}``. The grammar is built from the episode's
tool schemas (``tool_call_lark``); llguidance compiles it against the tokenizer and, at every
decode step, gives the set of allowed next tokens as a bitmask (``TurnConstraint``); the engine
sets every other logit to -inf before it chooses (``agentrl.engine.session``). The stop tokens
are allowed only where the grammar may end: a turn cannot stop inside a call.

Log-probs: the engine records the log-prob of each token under the constrained distribution
it was sampled from (the masked softmax). The trainer computes its ratios against the policy's
own, unconstrained log-probs (it recomputes the old log-probs, as for a bf16 decode copy), so
an update raises the probability the model itself gives to the rewarded, well-formed calls;
``rollout/logprob_gap`` then measures how much probability mass the mask removed.

Arguments: a parameter schema that does not say ``additionalProperties`` gets ``false``, so the
grammar allows exactly the declared arguments. A schema llguidance cannot compile falls back to
"any JSON object" for that tool's arguments (with a warning naming the tool).
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import torch

OPEN, CLOSE = "<tool_call>", "</tool_call>"
MODES = ("off", "tool_calls")  # rollout.constrained, agentrl eval / serve --constrained


def check_mode(constrained: str) -> None:
    """A ValueError naming the allowed values unless ``constrained`` is one of ``MODES``."""
    if constrained not in MODES:
        raise ValueError(f"constrained={constrained!r}: use 'off' or 'tool_calls'")


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``additionalProperties: false`` on objects that do not say."""
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) if isinstance(v, dict) else v for k, v in schema.items()}
    if "properties" in out:
        out["properties"] = {k: _strict(v) for k, v in out["properties"].items()}
        out.setdefault("additionalProperties", False)
    if isinstance(out.get("items"), dict):
        out["items"] = _strict(out["items"])
    return out


def call_schema(tool_schemas: list[dict[str, Any]], loose: frozenset[str] = frozenset()) -> dict:
    """The JSON schema of one call of any offered tool (``loose``: tools whose arguments may be
    any object)."""
    options = []
    for tool in tool_schemas:
        fn = tool.get("function", tool)
        name = fn["name"]
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        args = {"type": "object"} if name in loose else _strict(params)
        options.append({
            "type": "object",
            "properties": {"name": {"const": name}, "arguments": args},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        })  # fmt: skip
    # the layout json.dumps and the chat template write: models copy it; free whitespace would
    # let a sampling model spend its token budget on blanks inside a call
    layout = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
    return {"anyOf": options, "x-guidance": layout}


def tool_call_lark(
    tool_schemas: list[dict[str, Any]],
    loose: frozenset[str] = frozenset(),
    required: bool = False,
    special: tuple[int, int] | None = None,
) -> str:
    """A Lark grammar (llguidance dialect) for one turn: free text with any number of calls
    (``required``: one or more calls and nothing else, the API's ``tool_choice="required"``).
    Inside a call the layout is the chat template's: an optional newline around the body and
    ``json.dumps``'s separators, with no other whitespace.

    ``call_str`` is a lazy lexeme: free text ends at the first ``<tool_call>``, and from there
    only a well-formed call and ``</tool_call>`` may follow. ``special``: the token ids of
    ``<tool_call>`` and ``</tool_call>`` where the tokenizer has them as single added tokens
    (Qwen-style); either spelling then opens and closes a call."""
    schema = json.dumps(call_schema(tool_schemas, loose))
    opens, closes = [f'"{OPEN}"'], [f'"{CLOSE}"']
    if special is not None:
        opens.insert(0, f"<[{special[0]}]>")
        closes.insert(0, f"<[{special[1]}]>")
    if required:
        head = [
            'start: call ("\\n" call)*',
            'call: call_open "\\n"? body "\\n"? call_close',
            f"call_open: {' | '.join(opens)}",
        ]  # fmt: skip
    else:
        head = [
            "start: call* TEXT",
            'call: call_open "\\n"? body "\\n"? call_close',
            f"call_open: {' | '.join(['call_str', *(f'TEXT {o}' for o in opens[:-1])])}",
            f"call_str[lazy]: TEXT {opens[-1]}",
        ]  # fmt: skip
    return "\n".join([
        "%llguidance {}",
        *head,
        f"call_close: {' | '.join(closes)}",
        f"body: %json {schema}",
        r"TEXT: /(.|\n)*/",
    ])  # fmt: skip


def allowed_tokens(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """Bool (B, V) from llguidance's packed bitmask (B, ceil(V / 32)) int32: bit j of word w
    allows token 32 w + j."""
    shifts = torch.arange(32, dtype=torch.int32)  # (32,)
    bits = (bitmask[:, :, None] >> shifts) & 1  # (B, W, 32)
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab].bool()  # (B, V)


class TurnConstraint:
    """One sequence's grammar state for the current turn (an llguidance ``LLMatcher``)."""

    def __init__(self, matcher: Any) -> None:
        from llguidance.torch import fill_next_token_bitmask

        self.matcher, self._fill = matcher, fill_next_token_bitmask

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed next tokens into row ``row`` of a (B, W) int32 bitmask."""
        self._fill(self.matcher, bitmask, row)

    def advance(self, token: int) -> None:
        """The sampled token joins the turn (it was allowed: the mask made sure)."""
        if not self.matcher.consume_token(token):
            raise RuntimeError(f"the grammar refused token {token}: {self.matcher.get_error()}")

    def reset(self) -> None:
        """A new turn starts from the grammar's start."""
        self.matcher.reset()


class ToolCallGrammar:
    """Tool-call constraints for one tokenizer: the llguidance tokenizer is built once (about
    a second), each tool set's grammar compiled once, a fresh matcher per sequence."""

    def __init__(self, tokenizer: Any, stop_ids: list[int], vocab: int) -> None:
        try:
            import llguidance.hf
        except ImportError as err:  # a core dependency; only a broken install lacks it
            raise ImportError("rollout.constrained=tool_calls needs llguidance: "
                              "pip install llguidance") from err  # fmt: skip
        self.vocab = vocab
        self.lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab, eos_token=stop_ids)
        marks = [tokenizer.encode(m, add_special_tokens=False) for m in (OPEN, CLOSE)]
        single = all(len(m) == 1 and self.lltok.is_special_token(m[0]) for m in marks)
        self.special = (marks[0][0], marks[1][0]) if single else None
        self._grammars: dict[str, str] = {}

    def grammar(self, tool_schemas: list[dict[str, Any]], required: bool = False) -> str:
        """The compiled grammar of a tool set (cached by the schemas' JSON)."""
        key = json.dumps([tool_schemas, required], sort_keys=True)
        if key not in self._grammars:
            self._grammars[key] = self._compile(tool_schemas, required)
        return self._grammars[key]

    def _compile(self, tool_schemas: list[dict[str, Any]], required: bool) -> str:
        from llguidance import LLMatcher

        loose: set[str] = set()
        for tool in tool_schemas:
            fn = tool.get("function", tool)
            one = LLMatcher.grammar_from_lark(tool_call_lark([tool], special=self.special))
            is_error, messages = LLMatcher.validate_grammar_with_warnings(one, self.lltok)
            if is_error:
                warnings.warn(f"tool {fn['name']!r}: its parameter schema does not compile to a "
                              f"grammar ({messages[0]}); its calls are constrained to any JSON "
                              "object", stacklevel=3)  # fmt: skip
                loose.add(fn["name"])
        lark = tool_call_lark(tool_schemas, frozenset(loose), required, self.special)
        return LLMatcher.grammar_from_lark(lark)

    def matcher(self, tool_schemas: list[dict[str, Any]], required: bool = False) -> Any:
        """A fresh llguidance matcher at the start of a turn."""
        from llguidance import LLMatcher

        matcher = LLMatcher(self.lltok, self.grammar(tool_schemas, required))
        if matcher.is_error():
            raise ValueError(f"tool-call grammar: {matcher.get_error()}")
        return matcher

    def constraint(self, tool_schemas: list[dict[str, Any]],
                   required: bool = False) -> TurnConstraint | None:  # fmt: skip
        """A constraint for one sequence offered ``tool_schemas`` (None when it has none)."""
        if not tool_schemas:
            return None
        return TurnConstraint(self.matcher(tool_schemas, required))

    def accepts(self, tool_schemas: list[dict[str, Any]], token_ids: list[int],
                required: bool = False) -> bool:  # fmt: skip
        """Whether a whole turn (its stop token included) is one the grammar allows."""
        matcher = self.matcher(tool_schemas, required)
        return matcher.validate_tokens(token_ids) == len(token_ids)


def mask_logits(logits: torch.Tensor, constraints: list[TurnConstraint | None]) -> torch.Tensor:
    """``logits`` (B, V) with the tokens each row's constraint forbids at -inf (in place; a
    row without a constraint is left as it is)."""
    rows = [i for i, c in enumerate(constraints) if c is not None]
    if not rows:
        return logits
    vocab = logits.shape[-1]
    bitmask = torch.full((len(rows), (vocab + 31) // 32), -1, dtype=torch.int32)  # (R, W)
    for r, i in enumerate(rows):
        constraints[i].fill(bitmask, r)
    allowed = allowed_tokens(bitmask, vocab)  # (R, V)
    allowed[~allowed.any(dim=-1)] = True  # a grammar that allows nothing leaves the row as is
    allowed = allowed.to(logits.device)
    index = torch.tensor(rows, device=logits.device)
    logits[index] = logits[index].masked_fill(~allowed, float("-inf"))
    return logits
