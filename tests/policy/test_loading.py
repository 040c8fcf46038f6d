"""load_policy: the tiny id builds locally, tool-less templates are refused by name."""

from __future__ import annotations

import pytest
import torch

from agentrl.policy.loading import check_tool_template, load_policy, save_policy
from agentrl.tiny import builder as tinymodel
from agentrl.tiny.builder import TINY_MODEL_ID


def test_tiny_id_builds_in_cache_and_roundtrips(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tinymodel, "DEFAULT_STEPS", 1)
    monkeypatch.setitem(tinymodel.PRETRAIN, "drill_steps", 1)
    model, tok = load_policy(TINY_MODEL_ID)
    assert (tmp_path / "cache" / tinymodel.TINY_VERSION / "BUILD_COMPLETE").is_file()
    assert next(model.parameters()).dtype == torch.float32
    assert tok.pad_token is not None
    saved = save_policy(model, tok, tmp_path / "copy")
    model2, _ = load_policy(str(saved), dtype="bfloat16")
    assert next(model2.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_policy(str(saved), dtype="int3")


def test_template_without_tools_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tinymodel, "DEFAULT_STEPS", 1)
    monkeypatch.setitem(tinymodel.PRETRAIN, "drill_steps", 1)
    _, tok = load_policy(TINY_MODEL_ID)
    check_tool_template(tok, "tiny")  # fine
    tok.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    with pytest.raises(ValueError, match="some/model: the chat template doesn't support tools"):
        check_tool_template(tok, "some/model")


def test_a_reloaded_tiny_tokenizer_splits_exactly_as_the_one_the_model_was_pretrained_with(
    tmp_path,
) -> None:
    # AutoTokenizer gives a Qwen2 model's directory Qwen2Tokenizer, whose own pre-tokenizer
    # splits numbers into digits; the tiny tokenizer keeps "4821" as "48" "21".
    from transformers import AutoTokenizer, Qwen2Config

    from agentrl.policy.loading import load_tokenizer
    from agentrl.tiny.builder import corpus_texts, train_tokenizer

    built = train_tokenizer(corpus_texts(50, seed=1))
    built.save_pretrained(tmp_path)
    Qwen2Config(vocab_size=len(built)).save_pretrained(tmp_path)
    text = 'What is 4821 * 377? {"city": "Buenos Aires"} 21\u00b0C'
    want = built(text)["input_ids"]
    assert AutoTokenizer.from_pretrained(tmp_path)(text)["input_ids"] != want  # the trap
    loaded = load_tokenizer(tmp_path)
    assert loaded(text)["input_ids"] == want
    assert loaded.chat_template == built.chat_template and loaded.eos_token == "<|im_end|>"
    assert loaded.pad_token == "<|endoftext|>"
