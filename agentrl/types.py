"""Core records passed between the harness, the rollout and the trainer.

Messages are plain dicts in the Hugging Face chat format (``{"role": ..., "content": ...}``,
assistant tool calls under ``"tool_calls"``) so they go straight into ``apply_chat_template``.
Everything else is a small dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agentrl.token_record import decode_context, encode_context

Message = dict[str, Any]

#: Why an episode ended (DESIGN contract 3).
Termination = Literal["success", "failure", "max_turns", "length", "tool_timeout", "harness_error"]
TERMINATIONS: tuple[str, ...] = (
    "success",
    "failure",
    "max_turns",
    "length",
    "tool_timeout",
    "harness_error",
)

#: Error codes the parser and the tool path return to the model (counted by class).
PARSE_ERROR_CODES: tuple[str, ...] = (
    "unclosed_tag",  # <tool_call> without </tool_call>
    "invalid_json",  # body is not a JSON object (after lenient repair)
    "missing_name",  # no "name" string
    "bad_arguments",  # "arguments" is not an object (or a JSON string of one)
    "empty_call",  # <tool_call></tool_call>
    "stray_close_tag",  # </tool_call> with no opening tag
    "too_large",  # call body over the size limit
    "too_many_calls",  # calls past the per-turn cap (parser.MAX_CALLS), not run
)


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for: a tool name and its JSON arguments."""

    name: str
    arguments: dict[str, Any]

    def to_message_call(self) -> dict[str, Any]:
        """The HF chat-template form of this call (an entry of ``tool_calls``)."""
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ParseError:
    """A piece of model output that could not be read as a tool call."""

    code: str  # one of PARSE_ERROR_CODES
    message: str  # readable by the model: what was wrong and how a call must look


@dataclass(frozen=True)
class ParsedAction:
    """What one assistant turn said: free text, well-formed calls, and malformed ones."""

    text: str  # content outside <tool_call> blocks, stripped
    tool_calls: tuple[ToolCall, ...] = ()
    errors: tuple[ParseError, ...] = ()

    @property
    def is_final_answer(self) -> bool:
        """A turn with no call attempt at all is the agent's answer to the user."""
        return not self.tool_calls and not self.errors


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call, always returned, never raised (DESIGN contract 2)."""

    name: str
    content: str  # JSON text the model reads
    ok: bool = True
    error_code: str | None = None  # invalid_arguments, unknown_tool, timeout, exception, ...
    latency_s: float = 0.0
    fallback: str | None = None  # "default", "message" or "tool:<name>" when a fallback answered
    truncated_output: bool = False  # the result was cut to the tool's max_result_chars
    coerced: tuple[str, ...] = ()  # argument names whose values were coerced to their types


@dataclass
class RewardBreakdown:
    """A reward explained: weighted layers summed per turn and per episode (contract 4).

    ``per_turn[i]`` maps layer name -> unweighted score of assistant turn ``i``;
    ``layers`` maps layer name -> unweighted episode score; ``weights`` the config weights.
    ``total = sum(weights[k] * layers[k])``.
    """

    layers: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    per_turn: list[dict[str, float]] = field(default_factory=list)

    @property
    def total(self) -> float:
        return float(sum(self.weights.get(k, 0.0) * v for k, v in self.layers.items()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "layers": dict(self.layers),
            "weights": dict(self.weights),
            "per_turn": [dict(t) for t in self.per_turn],
        }


@dataclass
class Segment:
    """One context of an episode played with hierarchical memory (``agentrl.memory``).

    Memory rewrites the prompt, so such an episode is played in several contexts; each is
    stored token-exact like a whole episode: ``token_ids`` are what the policy saw and
    produced in that context (its prompt, then sampled ids and environment deltas),
    ``loss_mask``, ``logprobs`` and ``turn_of_token`` as in ``Trajectory``. ``messages``: the
    messages whose chat-template rendering ``token_ids`` are (the memory view, then the
    turns played in this context).
    """

    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    turn_of_token: list[int]
    messages: list[Message] = field(default_factory=list)


@dataclass
class Trajectory:
    """One finished episode, token-exact (DESIGN contract 1).

    ``token_ids`` are the ids the policy saw and produced, in order; ``loss_mask[i]`` is 1 where
    token ``i`` was sampled from the policy; ``logprobs[i]`` is its rollout-time log-probability
    (0.0 where the mask is 0). ``turn_of_token[i]`` is the assistant-turn index a sampled token
    belongs to (-1 for prompt, tool and environment tokens).

    ``segments``: with hierarchical memory, every context the episode was played in, in order
    (the last one's ids are ``token_ids`` etc.); empty when the whole episode is one context.
    Training reads ``contexts()`` and gives every segment the episode's advantage
    (``agentrl.algos.segments``).
    """

    task_id: str
    group_id: int
    messages: list[Message]
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    turn_of_token: list[int]
    reward: RewardBreakdown
    termination: str
    level: int = 1
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # name, arguments, result, ok
    info: dict[str, Any] = field(default_factory=dict)
    segments: list[Segment] = field(default_factory=list)

    def contexts(self) -> list[Segment]:
        """The episode's token-exact contexts: its segments, or itself as the only one."""
        if self.segments:
            return list(self.segments)
        own = Segment(self.token_ids, self.loss_mask, self.logprobs, self.turn_of_token)
        return [own]

    @property
    def success(self) -> bool:
        return self.termination == "success"

    @property
    def is_harness_fault(self) -> bool:
        """Harness faults are masked from the loss and from group baselines."""
        return self.termination == "harness_error"

    @property
    def num_policy_tokens(self) -> int:
        """Sampled tokens of the whole episode (every segment's)."""
        return int(sum(sum(c.loss_mask) for c in self.contexts()))

    def to_record(self) -> dict[str, Any]:
        """The JSON line written to ``trajectories.jsonl``, token-exact under ``"tokens"``
        (and ``"segments"``; ``agentrl.token_record``): ``from_record`` reads it back."""
        segments: dict[str, Any] = {}
        tokens = encode_context(self.token_ids, self.loss_mask, self.logprobs, self.turn_of_token)
        if self.segments:
            segments = {"num_segments": len(self.segments), "segments": [
                {"tokens": encode_context(s.token_ids, s.loss_mask, s.logprobs, s.turn_of_token),
                 "messages": s.messages} for s in self.segments]}  # fmt: skip
            if segments["segments"][-1]["tokens"] == tokens:  # the usual case: not twice
                tokens = {"v": tokens["v"], "last_segment": True}
        return {
            "task_id": self.task_id,
            "group_id": self.group_id,
            "level": self.level,
            "termination": self.termination,
            "success": self.success,
            "reward": self.reward.to_dict(),
            "messages": self.messages,
            "tool_calls": self.tool_calls,
            "num_tokens": len(self.token_ids),
            "num_policy_tokens": self.num_policy_tokens,
            "info": self.info,
            "tokens": tokens,
            **segments,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Trajectory:
        """The episode a ``to_record`` line holds (a ``"step"`` or ``"spans"`` key is ignored);
        ValueError for a record written before the token fields existed."""
        if "tokens" not in record:
            raise ValueError(
                "the record has no token ids ('tokens'): it was logged before agentrl wrote "
                "token-exact trajectories, so nothing can be trained from it"
            )
        segments = []
        for seg in record.get("segments") or []:
            segments.append(Segment(*decode_context(seg["tokens"]), list(seg["messages"])))
        tokens = record["tokens"]
        if tokens.get("last_segment"):
            last = segments[-1]
            ids, mask, lps, turns = (last.token_ids, last.loss_mask, last.logprobs,
                                     last.turn_of_token)  # fmt: skip
        else:
            ids, mask, lps, turns = decode_context(tokens)
        r = record["reward"]
        reward = RewardBreakdown(dict(r["layers"]), dict(r["weights"]),
                                 [dict(t) for t in r["per_turn"]])  # fmt: skip
        return cls(record["task_id"], int(record["group_id"]), list(record["messages"]),
                   list(ids), list(mask), list(lps), list(turns), reward, record["termination"],
                   int(record.get("level", 1)), list(record.get("tool_calls") or []),
                   dict(record.get("info") or {}), segments)  # fmt: skip
