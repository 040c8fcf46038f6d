"""The token-exact contract: prompt + generated ids + deltas decode to the full rendering."""

from __future__ import annotations

import json

import pytest
from runhelpers import assistant_turns

from agentrl.chat.render import (
    assistant_body,
    encode_conversation,
    encode_delta,
    encode_prompt,
    render_text,
    stop_token_ids,
    tokenize,
)
from agentrl.chat.template import IM_END
from agentrl.tiny.builder import corpus_texts, train_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_price",
            "description": "Look up a price by item.",
            "parameters": {
                "type": "object",
                "properties": {"item": {"type": "string"}, "year": {"type": "integer"}},
                "required": ["item"],
            },
        },
    }
]


def _call(item: str, year: int) -> dict:
    args = {"item": item, "year": year}
    return {"type": "function", "function": {"name": "lookup_price", "arguments": args}}


CONVO = [
    {"role": "user", "content": "Prices of zorba (1987) and kelim (2001)?"},
    {"role": "assistant", "content": "", "tool_calls": [_call("zorba", 1987)]},
    {"role": "tool", "content": json.dumps({"price": 42})},
    {"role": "assistant", "content": "Next.", "tool_calls": [_call("kelim", 2001)]},
    {"role": "tool", "content": json.dumps({"price": 7})},
    {"role": "user", "content": "And both at once?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [_call("zorba", 1987), _call("kelim", 2001)],
    },
    {"role": "tool", "content": json.dumps({"price": 42})},
    {"role": "tool", "content": json.dumps({"price": 7})},
    {"role": "assistant", "content": "zorba costs 42 and kelim costs 7."},
]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(corpus_texts(200, seed=3), vocab_size=512)


def _decode(tok, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def test_tool_call_rendering_matches_qwen_form(tok) -> None:
    text = render_text(tok, CONVO[:2], TOOLS)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n")
    assert "<tools>\n" + json.dumps(TOOLS[0]) + "\n</tools>" in text
    assert text.endswith(
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "lookup_price", "arguments": {"item": "zorba", "year": 1987}}\n'
        "</tool_call><|im_end|>\n"
    )
    body = assistant_body(tok, CONVO[3], TOOLS)
    assert body == (
        "Next.\n<tool_call>\n"
        '{"name": "lookup_price", "arguments": {"item": "kelim", "year": 2001}}\n</tool_call>'
    )
    grouped = render_text(tok, CONVO[:9], TOOLS)
    assert grouped.endswith(
        '<|im_start|>user\n<tool_response>\n{"price": 42}\n</tool_response>\n'
        '<tool_response>\n{"price": 7}\n</tool_response><|im_end|>\n'
    )
    no_tools = render_text(tok, CONVO[:1], None, add_generation_prompt=True)
    assert no_tools == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nPrices of zorba (1987) and kelim (2001)?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_prompt_generated_deltas_decode_to_full_rendering(tok) -> None:
    end = tok.convert_tokens_to_ids(IM_END)
    ids = encode_prompt(tok, CONVO[:1], TOOLS)
    history = CONVO[:1]
    i = 1
    while i < len(CONVO):
        msg = CONVO[i]
        assert msg["role"] == "assistant"
        ids += tokenize(tok, assistant_body(tok, msg, TOOLS)) + [end]  # the policy's ids
        history = history + [msg]
        j = i + 1
        while j < len(CONVO) and CONVO[j]["role"] != "assistant":
            j += 1
        if j == i + 1 and j == len(CONVO):
            break
        ids += encode_delta(tok, history, CONVO[i + 1 : j], TOOLS)
        history = CONVO[:j]
        assert _decode(tok, ids) == render_text(tok, history, TOOLS, add_generation_prompt=True)
        i = j
    assert _decode(tok, ids) + "\n" == render_text(tok, CONVO, TOOLS)
    conv_ids, _ = encode_conversation(tok, CONVO, TOOLS)
    assert conv_ids == ids


def test_delta_is_what_follows_im_end(tok) -> None:
    delta = encode_delta(tok, CONVO[:2], CONVO[2:3], TOOLS)
    assert _decode(tok, delta) == (
        '\n<|im_start|>user\n<tool_response>\n{"price": 42}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n"
    )
    with pytest.raises(ValueError, match="must end with an assistant"):
        encode_delta(tok, CONVO[:1], CONVO[2:3], TOOLS)


def test_non_prefix_stable_template_raises(tok) -> None:
    tok2 = train_tokenizer(["hello world"], vocab_size=300)
    tok2.chat_template = (
        "{% for m in messages|reverse %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    hist = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    with pytest.raises(ValueError, match="prefix-stable"):
        encode_delta(tok2, hist, [{"role": "user", "content": "c"}])


def test_mask_covers_exactly_assistant_bodies_and_im_end(tok) -> None:
    ids, mask = encode_conversation(tok, CONVO, TOOLS)
    assert len(ids) == len(mask)
    end = tok.convert_tokens_to_ids(IM_END)
    spans = assistant_turns(ids, mask)
    bodies = [assistant_body(tok, m, TOOLS) for m in CONVO if m["role"] == "assistant"]
    assert len(spans) == len(bodies) == 4
    for span, body in zip(spans, bodies, strict=True):
        assert span[-1] == end
        assert _decode(tok, span) == body + IM_END
    assert sum(mask) == sum(len(tokenize(tok, b)) + 1 for b in bodies)
    # the prompt part is unmasked and equals encode_prompt
    prompt = encode_prompt(tok, CONVO[:1], TOOLS)
    assert ids[: len(prompt)] == prompt and not any(mask[: len(prompt)])


def test_words_are_the_same_token_everywhere_and_stop_ids(tok) -> None:
    """Words, numbers and spaces are separate pieces, so a word copied from a request into
    JSON arguments or an answer is the very same token (what the copy heads need)."""
    pieces = tok.convert_ids_to_tokens(tokenize(tok, "year 20013 costs 4.75"))
    assert "".join(p for p in pieces if any(c.isdigit() for c in p)) == "20013475"
    texts = [tok.convert_tokens_to_string([p]) for p in pieces]
    assert all(t.isspace() or not any(c.isspace() for c in t) for t in texts)  # spaces apart

    def word_ids(text: str) -> list[int]:
        return [i for i in tokenize(tok, text) if tok.decode([i]).strip(' "{}:?.').isalpha()]

    request, call = word_ids("weather in Paris?"), word_ids('{"city": "Paris"}')
    assert request[-1] == call[-1] == word_ids("It is sunny in Paris.")[-1]
    assert stop_token_ids(tok) == [
        tok.convert_tokens_to_ids("<|im_end|>"),
        tok.convert_tokens_to_ids("<|endoftext|>"),
    ]
    assert len(tokenize(tok, "<tool_call>")) == 1
