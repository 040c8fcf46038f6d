"""``Engine``: agentrl's own decode loop for transformers causal LMs.

Two ways in:

- ``session(...)``: a ``DecodeSession`` for a rollout: sequences keep their KV cache across
  turns, the batch is refilled as sequences finish (``agentrl.rollout`` drives it);
- ``generate(prompts, ...)``: one turn for a list of prompts (the interface of
  ``HFGenerator``, for evaluation code and tests), through a session.

``dtype``: decode with a copy of the model in that dtype (``agentrl.engine.shadow``: bf16 where
it is native), refreshed from the model at the start of every call; ``decodes_own_weights``
then says False, and a trainer recomputes the old log-probs with the model itself.

Every sequence samples from its own random stream, seeded from the global torch RNG once per
call (so checkpointed RNG state makes a rollout reproducible, and the batch a sequence shares
does not change what it samples). No (B, N, V) logits are kept: each step reads one row of
logits per sequence.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from agentrl.engine.grammar import ToolCallGrammar, TurnConstraint
from agentrl.engine.kv import kv_shape
from agentrl.engine.session import DecodeSession
from agentrl.engine.shadow import is_lora, make_shadow, refresh_shadow
from agentrl.machine import available_memory
from agentrl.policy.generate import Sample
from agentrl.policy.prefix import MIN_SHARED_PREFIX, common_prefix_length
from agentrl.policy.roles import role_adapter

DEFAULT_SLOTS = 64  # rows that decode together (the KV cache holds this many sequences)
KV_FRACTION = 0.25  # of the memory still available, the most the slot cache may take


def slots_that_fit(model: Any, capacity: int, available: int, fraction: float = KV_FRACTION) -> int:
    """How many sequences of ``capacity`` tokens a slot cache may hold in ``fraction`` of
    ``available`` bytes: per slot, layers x 2 (keys, values) x kv_heads x head_dim x
    (capacity + 1) x bytes per element."""
    layers, heads, dim = kv_shape(model)
    element = next(model.parameters()).element_size()
    per_slot = layers * 2 * heads * dim * (capacity + 1) * element
    return max(1, int(fraction * available) // per_slot)


def draw_seeds(n: int, base: int | None = None) -> list[int]:
    """``n`` per-sequence seeds ``base, base + 1, ...``; ``base`` None: one draw of the global
    torch RNG (``draw_seed_base``)."""
    base = draw_seed_base() if base is None else base
    return [base + i for i in range(n)]


def draw_seed_base() -> int:
    """One draw of the global torch RNG: the base of a batch's per-sequence seeds."""
    return int(torch.randint(0, 2**62, (1,)))


class Engine:
    """Decode for many sequences at once with a causal LM; see the module docstring.

    ``slots``: how many sequences decode together (more wait in a queue for a free slot).
    ``share_prefix``: a prompt prefix all sequences share is computed once.
    ``dtype``: decode with a copy of the model in this dtype (None: the model itself).
    """

    supports_sessions = True
    accepts_seeds = True  # generate(..., seeds=): see TurnSession

    def fork(self, model: Any) -> Engine:
        """An engine with the same settings decoding ``model``, with its own tokenizer copy
        (an asynchronous rollout's worker thread decodes with it; ``agentrl.train.pipeline``)."""
        return Engine(model, copy.deepcopy(self.tokenizer), self.stop_ids, self.pad_id,
                      slots=self.slots, share_prefix=self.share_prefix,
                      dtype=self.dtype)  # fmt: skip

    def in_own_dtype(self) -> Engine:
        """This engine, or one with its settings decoding the model in the model's own dtype.
        A bf16 copy's rounding depends on which sequences share a batch (oneDNN picks kernels
        by row count), so a greedy episode can change with its neighbours; in the model's
        fp32 it does not. Held-out evaluations decode this way to be reproducible."""
        if not self.casts_weights:
            return self
        return Engine(self._model, self.tokenizer, self.stop_ids, self.pad_id,
                      slots=self.slots, share_prefix=self.share_prefix)  # fmt: skip

    def __init__(self, model: Any, tokenizer: Any, stop_ids: list[int], pad_id: int,
                 slots: int = DEFAULT_SLOTS, share_prefix: bool = True,
                 dtype: torch.dtype | None = None) -> None:  # fmt: skip
        self.tokenizer = tokenizer
        self.stop_ids, self.pad_id = list(stop_ids), pad_id
        self.slots, self.share_prefix, self.dtype = slots, share_prefix, dtype
        self.model = model
        self._grammar: ToolCallGrammar | None = None

    @property
    def model(self) -> Any:
        """The policy whose weights are decoded (assigning a new one drops the copy)."""
        return self._model

    @model.setter
    def model(self, model: Any) -> None:
        self._model, self._shadows = model, {}

    @property
    def casts_weights(self) -> bool:
        """Whether decoding runs on a copy in a dtype other than the model's (``dtype``)."""
        return self.dtype is not None and self.dtype != next(self._model.parameters()).dtype

    @property
    def decodes_own_weights(self) -> bool:
        """False when decoding runs on a copy (in another dtype, or a LoRA policy's merged
        copy): its log-probs differ from the model's by rounding."""
        return not is_lora(self._model) and not self.casts_weights

    def decoding_model(self, adapter: str | None = None) -> Any:
        """The module that decodes: the model, or its copy (``dtype``, adapters merged) with
        current weights. ``adapter``: a role adapter's copy (``agentrl.policy.roles``)."""
        if adapter is not None:
            with role_adapter(self._model, adapter):
                return self._copy(adapter)
        if self.decodes_own_weights:
            return self._model
        return self._copy(None)

    def _copy(self, key: str | None) -> Any:
        """The decoding copy for the active adapter(s), made once and refreshed after."""
        if key not in self._shadows:
            own = next(self._model.parameters()).dtype
            self._shadows[key] = make_shadow(self._model, self.dtype or own)
        else:
            refresh_shadow(self._shadows[key], self._model)
        return self._shadows[key]

    def tool_call_grammar(self) -> ToolCallGrammar:
        """This engine's tool-call grammars (built on first use: about a second)."""
        if self._grammar is None:
            vocab = self._model.get_output_embeddings().weight.shape[0]
            self._grammar = ToolCallGrammar(self.tokenizer, self.stop_ids, vocab)
        return self._grammar

    def tool_call_constraint(self, tool_schemas: list[dict],
                             required: bool = False) -> TurnConstraint | None:  # fmt: skip
        """A grammar that lets a sequence offered ``tool_schemas`` write only well-formed calls
        of them (``agentrl.engine.grammar``; pass it to ``session(...).add``). ``required``:
        each turn is one or more calls and nothing else."""
        return self.tool_call_grammar().constraint(tool_schemas, required)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def session(self, n_sequences: int, capacity: int, *, temperature: float = 1.0,
                top_p: float = 1.0, greedy: bool = False,
                adapter: str | None = None) -> DecodeSession:  # fmt: skip
        """A session for up to ``n_sequences`` sequences of at most ``capacity`` tokens; as
        many decode together as ``slots`` and the memory allow (the rest wait for a slot).
        ``adapter``: decode with that role adapter (``agentrl.policy.roles``)."""
        model = self.decoding_model(adapter)
        fit = slots_that_fit(model, capacity, available_memory(self.device))
        slots = max(1, min(self.slots, n_sequences, fit))
        return DecodeSession(model, self.stop_ids, self.pad_id, slots=slots,
                             capacity=capacity,
                             temperature=temperature, top_p=top_p, greedy=greedy)  # fmt: skip

    def shared_prefix(self, prompts: list[list[int]]) -> int:
        """Tokens all ``prompts`` share, worth computing once (0 when too few)."""
        if not self.share_prefix or len(prompts) < 2:
            return 0
        n = common_prefix_length(prompts)
        return n if n >= MIN_SHARED_PREFIX else 0

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False,
                 seeds: list[int] | None = None) -> list[Sample]:  # fmt: skip
        """One turn for each prompt: sampled ids (stop token included) and their log-probs.

        ``seeds``: each prompt's sampling seed (None: drawn from the global torch RNG)."""
        if not prompts:
            return []
        capacity = max(map(len, prompts)) + max_new_tokens
        sess = self.session(len(prompts), capacity, temperature=temperature, top_p=top_p,
                            greedy=greedy)  # fmt: skip
        shared = self.shared_prefix(prompts)
        if shared:
            sess.set_prefix(prompts[0][:shared])
        seeds = draw_seeds(len(prompts)) if seeds is None else seeds
        for i, (p, seed) in enumerate(zip(prompts, seeds, strict=True)):
            sess.add(i, p, max_new_tokens, seed)
        out: dict[int, Sample] = {}
        while len(out) < len(prompts):
            for key, sample in sess.step():
                out[key] = sample
                sess.release(key)
        return [out[i] for i in range(len(prompts))]
