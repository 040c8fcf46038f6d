"""The tiny model builds locally, reloads with the Auto classes, and is reused from disk."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.chat.render import encode_prompt, render_text, stop_token_ids
from agentrl.tiny.builder import MARKER, build_tiny_model


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

    from agentrl.tiny.builder import _drill_row, corpus_texts, train_tokenizer
    from agentrl.tiny.corpus import copy_drill

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
    from agentrl.tiny.builder import corpus_texts, induction_rows, train_tokenizer

    tok = train_tokenizer(corpus_texts(50, seed=1))
    rows = induction_rows(tok, 20, seed=0)
    assert rows == induction_rows(tok, 20, seed=0)  # deterministic in the seed
    special = set(tok.all_special_ids)
    for ids, mask in rows:
        n = sum(mask)
        assert 8 <= n <= 24 and mask[-n:] == [1] * n and sum(mask[:-n]) == 0
        assert ids[:n] == ids[-n:]  # the trained part repeats the opening span
        assert not special & set(ids)


# A child process: build into argv[1] with the small test sizes of conftest.py; log
# "build <pid>" when a build really starts (every build trains the tokenizer first) and
# "done <pid> <path> complete=<marker there?>" when build_tiny_model returns.
_CHILD = """
import os, sys
import torch
torch.set_num_threads(1)
import agentrl.tiny.builder as b
log = open(sys.argv[2], "a", buffering=1)
train = b.train_tokenizer
def counted(*a, **k):
    log.write(f"build {os.getpid()}\\n")
    return train(*a, **k)
b.train_tokenizer = counted
log.write(f"start {os.getpid()}\\n")
out = b.build_tiny_model(sys.argv[1], steps=12, drill_steps=10, induction_steps=10, progress=False)
log.write(f"done {os.getpid()} {out} complete={b.is_complete(out)}\\n")
"""


@pytest.mark.slow  # one small build (~2 min on 2 loaded cores); two at once on the old code
def test_two_processes_building_at_once_build_once_and_both_reuse_it(tmp_path) -> None:
    out, log = tmp_path / "tiny", tmp_path / "log.txt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-c", _CHILD, str(out), str(log)]
    procs = [subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errs = [p.communicate(timeout=540)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    events = [line.split() for line in log.read_text().splitlines()]
    pids = sorted(str(p.pid) for p in procs)
    starts = [i for i, e in enumerate(events) if e[0] == "start"]
    assert sorted(events[i][1] for i in starts) == pids
    assert max(starts) < min(i for i, e in enumerate(events) if e[0] == "done")  # at once
    builds = [e[1] for e in events if e[0] == "build"]
    assert len(builds) == 1  # the second process waited for the lock, then reused the build
    done = [e for e in events if e[0] == "done"]
    assert sorted(e[1] for e in done) == pids
    assert {e[2] for e in done} == {str(out)} and {e[3] for e in done} == {"complete=True"}
    assert (out / MARKER).is_file() and (out / MARKER).read_text().startswith("steps=")
    assert AutoModelForCausalLM.from_pretrained(out).config.model_type == "qwen2"
    assert AutoTokenizer.from_pretrained(out).eos_token == "<|im_end|>"
    # no temp directory left behind; the lock file stays (see agentrl.tiny.lock)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tiny.lock", "log.txt", "tiny"]


def test_temp_dirs_of_dead_builds_are_removed_and_live_ones_kept(tmp_path) -> None:
    out = tmp_path / "tiny"
    out.mkdir()
    (out / MARKER).write_text("steps=1\n")  # a finished build: nothing is rebuilt
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for pid in (dead.pid, live.pid):
            (tmp_path / f".tiny.tmp-{pid}").mkdir()
            (tmp_path / f".tiny.tmp-{pid}" / "model.safetensors").write_bytes(b"x" * 100)
        (tmp_path / ".tiny.tmp-notapid").mkdir()  # not a build's: left alone
        assert build_tiny_model(out, progress=False) == out
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == sorted([".tiny.lock", ".tiny.tmp-notapid", f".tiny.tmp-{live.pid}", "tiny"])
        assert (out / MARKER).read_text() == "steps=1\n"
    finally:
        live.kill()
        live.wait()
