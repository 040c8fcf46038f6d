"""The tiny model builds locally, reloads with the Auto classes, and is reused from disk."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.chat.render import encode_prompt, render_text, stop_token_ids
from agentrl.tinymodel import MARKER, build_tiny_model


def test_build_reload_and_reuse(tmp_path) -> None:
    out = build_tiny_model(
        tmp_path / "tiny", steps=2, drill_steps=2, induction_steps=2, progress=False
    )
    assert (out / MARKER).is_file()
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.model_type == "qwen2" and model.config.tie_word_embeddings
    assert next(model.parameters()).dtype == torch.float32
    n_params = sum(p.numel() for p in model.parameters())
    assert 1_000_000 < n_params < 10_000_000
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    tools = [{"type": "function", "function": {"name": "get_stock", "parameters": {}}}]
    msgs = [{"role": "user", "content": "stock of ABC?"}]
    assert "get_stock" in render_text(tok, msgs, tools)
    ids = encode_prompt(tok, msgs, tools)
    out_ids = model.generate(
        torch.tensor([ids]), max_new_tokens=3, do_sample=False, eos_token_id=stop_token_ids(tok)
    )
    assert out_ids.shape[1] <= len(ids) + 3
    # reuse: a second call returns the same build without rewriting it
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert (
        build_tiny_model(
            tmp_path / "tiny", steps=2, drill_steps=2, induction_steps=2, progress=False
        )
        == out
    )
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    # an unfinished build (no marker) is rebuilt
    (out / MARKER).unlink()
    build_tiny_model(tmp_path / "tiny", steps=1, drill_steps=1, induction_steps=1, progress=False)
    assert (out / MARKER).is_file()
    assert (out / "model.safetensors").stat().st_mtime_ns != stamp


def test_copy_drill_rows_train_on_the_answer_only() -> None:
    import random

    from agentrl.tinycorpus import copy_drill
    from agentrl.tinymodel import _drill_row, corpus_texts, train_tokenizer

    tok = train_tokenizer(corpus_texts(50, seed=1))
    messages = copy_drill(random.Random(3))
    ids, mask = _drill_row(tok, messages)
    trained = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert trained == messages[1]["content"] + "<|im_end|>"
    prompt = tok.decode(ids[: mask.index(1)])
    assert (
        prompt == f"<|im_start|>user\n{messages[0]['content']}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert "system" not in prompt  # drills carry no system turn (measured: faster copy learning)


def test_induction_rows_repeat_a_random_span_and_train_on_the_repeat() -> None:
    from agentrl.tinymodel import corpus_texts, induction_rows, train_tokenizer

    tok = train_tokenizer(corpus_texts(50, seed=1))
    rows = induction_rows(tok, 20, seed=0)
    assert rows == induction_rows(tok, 20, seed=0)  # deterministic in the seed
    special = set(tok.all_special_ids)
    for ids, mask in rows:
        n = sum(mask)
        assert 8 <= n <= 24 and mask[-n:] == [1] * n and sum(mask[:-n]) == 0
        assert ids[:n] == ids[-n:]  # the trained part repeats the opening span
        assert not special & set(ids)
