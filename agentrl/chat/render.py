"""Token-exact rendering of tool conversations (DESIGN contract 1).

The rollout and SFT build token ids the same way: the prompt is tokenized once, every
assistant turn is the policy's own ids ending with ``<|im_end|>``, and every environment
turn after it is a *delta*: the text the chat template adds after that ``<|im_end|>``,
tokenized on its own. History is never re-tokenized. Works with any Hugging Face tokenizer
whose chat template is prefix-stable (each rendering extends the previous one), e.g. Qwen2.5.
"""

from __future__ import annotations

from typing import Any

from agentrl.chat.template import ENDOFTEXT, IM_END
from agentrl.types import Message

Tools = list[dict[str, Any]] | None


def render_text(
    tokenizer: Any,
    messages: list[Message],
    tools: Tools = None,
    add_generation_prompt: bool = False,
) -> str:
    """The chat template's text for ``messages`` (and ``tools``)."""
    return tokenizer.apply_chat_template(
        messages,
        tools=tools or None,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
    )


def tokenize(tokenizer: Any, text: str) -> list[int]:
    """Ids of ``text`` with no BOS/EOS added (special-token strings map to their ids)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def im_end_id(tokenizer: Any) -> int:
    """The id of ``<|im_end|>``, the token every assistant turn ends with."""
    tid = tokenizer.convert_tokens_to_ids(IM_END)
    if tid is None or tid == tokenizer.unk_token_id:
        raise ValueError(f"tokenizer has no {IM_END} token; a Qwen-style chat template is needed")
    return int(tid)


def stop_token_ids(tokenizer: Any) -> list[int]:
    """Ids that end generation: ``<|im_end|>`` and ``<|endoftext|>`` where present."""
    ids: list[int] = []
    for tok in (IM_END, ENDOFTEXT):
        tid = tokenizer.convert_tokens_to_ids(tok)
        if tid is not None and tid != tokenizer.unk_token_id and tid not in ids:
            ids.append(int(tid))
    return ids


def encode_prompt(tokenizer: Any, messages: list[Message], tools: Tools = None) -> list[int]:
    """Ids of the rendering of ``messages`` followed by the generation prompt."""
    return tokenize(tokenizer, render_text(tokenizer, messages, tools, add_generation_prompt=True))


def _cut_after_last_im_end(text: str) -> str:
    """``text`` up to and including its last ``<|im_end|>`` (what the policy generated)."""
    idx = text.rfind(IM_END)
    if idx < 0:
        raise ValueError(f"rendered history has no {IM_END}; is this a Qwen-style template?")
    return text[: idx + len(IM_END)]


def delta_text(
    tokenizer: Any, history: list[Message], new_messages: list[Message], tools: Tools = None
) -> str:
    """The text the template adds after the last assistant ``<|im_end|>`` of ``history``."""
    if not history or history[-1].get("role") != "assistant":
        raise ValueError("encode_delta: history must end with an assistant message")
    before = _cut_after_last_im_end(render_text(tokenizer, history, tools))
    after = render_text(tokenizer, history + list(new_messages), tools, add_generation_prompt=True)
    if not after.startswith(before):
        raise ValueError(
            "chat template is not prefix-stable: rendering history + new messages does not "
            "start with the rendering of history, so turns cannot be appended as deltas"
        )
    return after[len(before) :]


def encode_delta(
    tokenizer: Any, history: list[Message], new_messages: list[Message], tools: Tools = None
) -> list[int]:
    """Ids to append after the policy's ``<|im_end|>`` for ``new_messages`` + generation prompt.

    ``history`` ends with an assistant message whose generated ids ended with ``<|im_end|>``.
    Only the delta text is tokenized (special tokens split the text, so the ids equal those a
    full tokenization would give for that span).
    """
    return tokenize(tokenizer, delta_text(tokenizer, history, new_messages, tools))


def encode_observation(tokenizer: Any, env: Any, obs: list[Message]) -> list[int]:
    """``encode_delta`` for the observation ``obs`` an env just appended to its messages."""
    history = env.messages[: len(env.messages) - len(obs)]
    return encode_delta(tokenizer, history, obs, env.tool_schemas)


def _body_in_context(
    tokenizer: Any, history: list[Message], message: Message, tools: Tools = None
) -> str:
    """What the template renders for ``message`` between the assistant header and ``<|im_end|>``."""
    prefix = render_text(tokenizer, history, tools, add_generation_prompt=True)
    full = render_text(tokenizer, history + [message], tools)
    if not full.startswith(prefix):
        raise ValueError(
            "chat template is not prefix-stable: an assistant turn does not extend the "
            "generation prompt"
        )
    return _cut_after_last_im_end(full[len(prefix) :])[: -len(IM_END)]


def assistant_body(tokenizer: Any, message: Message, tools: Tools = None) -> str:
    """The text the policy must generate for assistant ``message`` (without ``<|im_end|>``)."""
    return _body_in_context(tokenizer, [{"role": "user", "content": "hi"}], message, tools)


def encode_conversation(
    tokenizer: Any, messages: list[Message], tools: Tools = None
) -> tuple[list[int], list[int]]:
    """(ids, loss_mask) for a whole conversation, built exactly as a rollout builds them.

    Prompt up to the first assistant message: mask 0. Each assistant message: its body ids
    plus ``<|im_end|>``, mask 1. Messages after an assistant message: the delta ids (with the
    generation prompt when another assistant turn follows or the conversation ends), mask 0.
    """
    end_id = im_end_id(tokenizer)
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
    if first is None:
        ids = encode_prompt(tokenizer, messages, tools)
        return ids, [0] * len(ids)
    ids = encode_prompt(tokenizer, messages[:first], tools)
    mask = [0] * len(ids)
    for i in range(first, len(messages)):
        if messages[i].get("role") != "assistant":
            continue
        body = _body_in_context(tokenizer, messages[:i], messages[i], tools)
        gen = tokenize(tokenizer, body) + [end_id]  # what the policy generates
        ids += gen
        mask += [1] * len(gen)
        if i + 1 == len(messages):
            break
        j = next(
            (k for k in range(i + 1, len(messages)) if messages[k].get("role") == "assistant"),
            len(messages),
        )
        delta = encode_delta(tokenizer, messages[: i + 1], messages[i + 1 : j], tools)
        ids += delta
        mask += [0] * len(delta)
    return ids, mask
