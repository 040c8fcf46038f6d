"""SFT: loss only on assistant tokens, numbers checked by hand, loss drops, deterministic."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.sft import lr_at, masked_lm_loss, plain_progress, sft_train
from agentrl.tiny.builder import corpus_texts, make_model, train_tokenizer
from agentrl.tiny.corpus import make_corpus

SMALL = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(corpus_texts(200, seed=3), vocab_size=512)


def test_masked_lm_loss_hand_computed() -> None:
    # V=2; position t predicts ids[t+1]. Logits log(3), 0 give p = 3/4, 1/4.
    logits = torch.tensor([[[math.log(3), 0.0], [0.0, math.log(3)], [0.0, 0.0]]])  # (1, 3, 2)
    ids = torch.tensor([[1, 0, 1]])  # (1, 3): targets 0 (p=3/4) then 1 (p=3/4)
    mask = torch.tensor([[0, 1, 0]])  # only the first target counts
    loss = masked_lm_loss(logits, ids, mask)
    assert loss.item() == pytest.approx(-math.log(0.75), abs=1e-6)
    # changing a target with mask 0 changes nothing
    assert masked_lm_loss(logits, torch.tensor([[1, 0, 0]]), mask).item() == pytest.approx(
        loss.item(), abs=1e-7
    )
    both = masked_lm_loss(logits, torch.tensor([[1, 1, 1]]), torch.tensor([[0, 1, 1]]))
    assert both.item() == pytest.approx((-math.log(0.25) - math.log(0.75)) / 2, abs=1e-6)


def test_lr_schedule_numbers() -> None:
    assert lr_at(0, 100, 1.0, warmup=10) == pytest.approx(0.1)
    assert lr_at(10, 100, 1.0, warmup=10) == pytest.approx(1.0)
    assert lr_at(100, 100, 1.0, warmup=10) == pytest.approx(0.1)
    assert lr_at(55, 100, 1.0, warmup=10) == pytest.approx(0.55)
    assert lr_at(70, 100, 2.0, warmup=0, schedule="constant") == 2.0


def test_loss_drops_and_is_deterministic(tok) -> None:
    data = sorted(make_corpus(40, seed=1), key=lambda ex: len(str(ex)))[:4]  # short ones
    model = make_model(tok, seed=0, copy_heads=False, **SMALL)
    first = sft_train(model, tok, data, epochs=1, lr=1e-2, batch_size=4, progress=False)
    stats = sft_train(model, tok, data, epochs=25, lr=1e-2, batch_size=4, progress=False)
    assert stats["steps"] == 25
    halves = sft_train(make_model(tok, seed=0, copy_heads=False, **SMALL), tok, data,
                       epochs=2, lr=1e-2, batch_size=2, progress=False)  # fmt: skip
    assert halves["steps"] == 4  # batches of 2: twice the steps over the same rows
    assert stats["final_loss"] < 0.5 * first["final_loss"]
    again = make_model(tok, seed=0, copy_heads=False, **SMALL)
    first2 = sft_train(again, tok, data, epochs=1, lr=1e-2, batch_size=4, progress=False)
    assert first2["final_loss"] == pytest.approx(first["final_loss"], rel=1e-5)
    assert first2["tokens"] == first["tokens"]


def test_stop_loss_ends_the_sft_at_the_first_window_at_or_below_it(tok) -> None:
    """The run stops at the first step whose 10-step mean loss is at or below ``stop_loss``;
    the steps it took are exactly those of the same run without it up to that point."""
    data = sorted(make_corpus(40, seed=1), key=lambda ex: len(str(ex)))[:4]
    full = sft_train(make_model(tok, seed=0, copy_heads=False, **SMALL), tok, data,
                     epochs=40, lr=1e-2, batch_size=4, progress=False)  # fmt: skip
    assert full["steps"] == full["planned_steps"] == 40
    never = sft_train(make_model(tok, seed=0, copy_heads=False, **SMALL), tok, data, epochs=40,
                      lr=1e-2, batch_size=4, progress=False, stop_loss=1e-9)  # fmt: skip
    assert never["steps"] == 40 and never["final_loss"] == pytest.approx(full["final_loss"])
    at_once = sft_train(make_model(tok, seed=0, copy_heads=False, **SMALL), tok, data, epochs=40,
                        lr=1e-2, batch_size=4, progress=False, stop_loss=1e9)  # fmt: skip
    assert at_once["steps"] == 10  # the first full window
    # a threshold between the first window's loss and the end's: stops in between
    target = (at_once["final_loss"] + full["final_loss"]) / 2
    mid = sft_train(make_model(tok, seed=0, copy_heads=False, **SMALL), tok, data, epochs=40,
                    lr=1e-2, batch_size=4, progress=False, stop_loss=target)  # fmt: skip
    assert 10 < mid["steps"] < 40 and mid["planned_steps"] == 40
    assert mid["final_loss"] <= target


def test_micro_batches_give_the_whole_batch_loss_and_gradients(tiny_policy) -> None:
    """Cut into micro-batches by ``max_logits``, a batch's loss and every gradient equal the
    whole batch's (the same token mean), and the cut respects the budget."""
    import copy

    from agentrl.sft import collate, micro_batches, vocab_size

    model, tok = tiny_policy
    rows = [(list(range(3, 3 + n)), [0] * (n // 2) + [1] * (n - n // 2)) for n in (9, 30, 17, 5)]
    vocab = vocab_size(model)
    parts = micro_batches(rows, 2 * 30 * vocab, vocab)
    assert [len(p) for p in parts] == [2, 2] and sum(parts, []) == rows
    assert all(len(p) * max(len(r[0]) for r in p) * vocab <= 2 * 30 * vocab for p in parts)
    assert [len(p) for p in micro_batches(rows, 34 * vocab, vocab)] == [1, 1, 2]
    assert micro_batches(rows, None, vocab) == [rows]

    def grads(pieces):
        m = copy.deepcopy(model)
        total = sum(sum(mask[1:]) for _, mask in rows)
        value = 0.0
        for piece in pieces:
            ids, mask, attn = collate(piece, 0)
            loss = masked_lm_loss(m(input_ids=ids, attention_mask=attn).logits, ids, mask, total)
            loss.backward()
            value += loss.item()
        return value, [p.grad.clone() for p in m.parameters()]

    whole, g_whole = grads([rows])
    cut, g_cut = grads(parts)
    ids, mask, attn = collate(rows, 0)
    assert whole == pytest.approx(masked_lm_loss(model(input_ids=ids, attention_mask=attn).logits,
                                                 ids, mask).item(), rel=1e-6)  # fmt: skip
    assert cut == pytest.approx(whole, rel=1e-5)
    for a, b in zip(g_cut, g_whole, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_progress_in_a_log_file_is_plain_lines(tok, capsys) -> None:
    ticks = iter(range(0, 1000, 7))  # a fake clock: 7 s per call
    advance = plain_progress(25, lines=10, clock=lambda: next(ticks))
    for step in range(25):
        advance(f"warm start loss {step / 100:.2f}")
    lines = capsys.readouterr().out.splitlines()
    # every 2nd step (25 // 10) and the last; the clock was read once at the start
    assert len(lines) == 13
    assert lines[0] == "warm start loss 0.01: 2/25 steps, 7 s"
    assert lines[-1] == "warm start loss 0.24: 25/25 steps, 91 s"
    # sft_train's own progress, with output captured (not a terminal): the same plain lines
    data = sorted(make_corpus(40, seed=1), key=lambda ex: len(str(ex)))[:4]
    model = make_model(tok, seed=0, copy_heads=False, **SMALL)
    sft_train(model, tok, data, epochs=20, lr=1e-2, batch_size=4, desc="warm start")
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[1].split(",")[0] for line in out] == [
        f"{n}/20 steps" for n in range(2, 21, 2)
    ]
    assert all(line.startswith("warm start loss ") for line in out)
