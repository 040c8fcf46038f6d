"""Warm-start demonstrations played with hierarchical memory: a reference episode cut into the
contexts a memory rollout would see.

A rollout with ``rollout.memory`` restarts the context whenever the verbatim window grows past
``hot_turns + rewrite_every - 1`` turns: the new prompt is ``EpisodeMemory.view`` of the
dialogue so far (task, memory note, hot turns). A demonstration for such a policy must show it
those same prompts, or the note is something it never saw before RL. ``memory_rows`` replays
that schedule on a finished reference episode and returns one SFT row per context: the view's
tokens carry no loss (the policy did not write them in this context, as in the rollout's
segments), the turns written in the context do.
"""

from __future__ import annotations

from typing import Any

from agentrl.chat.render import encode_conversation, encode_prompt, tokenize
from agentrl.config.memory import MemoryConfig
from agentrl.memory.episode import EpisodeMemory
from agentrl.memory.turns import split_turns
from agentrl.types import Message


def memory_contexts(messages: list[Message], cfg: MemoryConfig,
                    count_tokens: Any) -> list[tuple[list[Message], int]]:  # fmt: skip
    """``(context messages, view length)`` per context of the episode ``messages``.

    A context is its prompt (the episode's opening, or a memory view: its first ``view
    length`` messages) followed by the turns played in it, up to its last assistant message.
    """
    head, turns = split_turns(messages)
    memory = EpisodeMemory(cfg, count_tokens)
    context, start, out = list(head), 0, []
    for played in range(1, len(turns)):  # the dialogue after ``played`` turns
        if memory.needs_rewrite(played):
            out.append((context + [m for t in turns[start:played - 1] for m in t]
                        + [turns[played - 1][0]], len(context)))  # fmt: skip
            context = memory.view(head + [m for t in turns[:played] for m in t])
            start = played
    out.append((context + [m for t in turns[start:] for m in t], len(context)))
    return out


def memory_rows(tokenizer: Any, messages: list[Message], tools: Any,
                cfg: MemoryConfig) -> list[tuple[list[int], list[int]]]:  # fmt: skip
    """SFT ``(ids, loss_mask)`` rows of one demonstration as a memory rollout plays it: one
    per context, the assistant turns written in that context trained, the view not."""
    rows = []
    count = lambda text: len(tokenize(tokenizer, text))  # noqa: E731
    for context, view_len in memory_contexts(messages, cfg, count):
        ids, mask = encode_conversation(tokenizer, context, tools)
        if view_len and any(m.get("role") == "assistant" for m in context[:view_len]):
            n = len(encode_prompt(tokenizer, context[:view_len], tools))
            mask = [0] * n + mask[n:]
        rows.append((ids, mask))
    return rows
