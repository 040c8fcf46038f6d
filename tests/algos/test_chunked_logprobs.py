"""The chunked LM head: the same log-probs, entropies, hidden states and gradients as the full
(B, T, V) logits (plain and LoRA models, with and without a shared prefix), no tensor with a
vocabulary-wide last dimension larger than one chunk, and the ``micro_batch_tokens: auto``
budget's numbers."""

import copy
import math
import random
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from agentrl import machine
from agentrl.algos import forward, memory
from agentrl.algos.batch import Batch
from agentrl.algos.forward import forward_logprobs, lm_parts, loss_free_prefix_length
from agentrl.algos.grpo import grpo_update
from agentrl.algos.memory import ModelShape
from agentrl.algos.value import ValueHead
from agentrl.policy.lora import AdapterDisabled, apply_lora

CHUNK = 7  # positions per head chunk in these tests: every batch needs several chunks


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(forward, "chunk_rows", lambda vocab: CHUNK)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _batch(vocab: int, shared: int = 40, seed: int = 0) -> Batch:
    """4 right-padded rows of 70..90 tokens; the first ``shared`` ids common to all rows,
    loss tokens in two stretches after them (two assistant turns)."""
    g = torch.Generator().manual_seed(seed)
    lengths = [90, 82, 70, 86]
    ids = torch.randint(3, vocab, (4, 90), generator=g)
    ids[:, :shared] = ids[0, :shared]
    attention = torch.zeros(4, 90, dtype=torch.long)
    for i, n in enumerate(lengths):
        attention[i, :n] = 1
    ids = ids * attention  # pad id 0
    mask = torch.zeros(4, 89)
    mask[:, 50:60] = 1.0
    mask[:, 66:80] = 1.0
    mask = mask * attention[:, 1:]
    return Batch(ids, attention, ids[:, 1:], mask, torch.zeros(4, 89))


def _run(model, batch, chunked: bool, monkeypatch, value: ValueHead | None = None, temp=0.7):
    """(logp, entropy, hidden or None, {param: grad}) of a loss using all three."""
    monkeypatch.setattr(forward, "CHUNKED_HEAD", chunked)
    model.zero_grad(set_to_none=True)
    out = forward_logprobs(model, batch, temp, with_entropy=True, entropy_grad=True,
                           with_hidden=value is not None)  # fmt: skip
    logp, ent = out[0], out[1]
    weights = torch.linspace(-1.0, 1.0, logp.shape[1])  # (T-1,) different per position
    loss = ((logp * weights + 0.3 * ent) * batch.mask).sum()
    hidden = None
    if value is not None:
        hidden = out[2]
        loss = loss + value(hidden).pow(2).mean()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), ent.detach(), None if hidden is None else hidden.detach(), grads


def _assert_same(a, b, tol=1e-5):
    assert torch.allclose(a[0], b[0], atol=tol), (a[0] - b[0]).abs().max()
    assert torch.allclose(a[1], b[1], atol=tol), (a[1] - b[1]).abs().max()
    if a[2] is not None:
        assert torch.allclose(a[2], b[2], atol=tol), (a[2] - b[2]).abs().max()
    assert a[3].keys() == b[3].keys() and a[3]
    for name in a[3]:
        ga, gb = a[3][name], b[3][name]
        assert gb.abs().max() > 0, name
        assert torch.allclose(ga, gb, atol=tol, rtol=1e-4), (name, (ga - gb).abs().max())


def _lora(model):
    peft = apply_lora(copy.deepcopy(model), rank=4, alpha=8.0, dropout=0.0,
                      target_modules=["q_proj", "v_proj"])  # fmt: skip
    g = torch.Generator().manual_seed(3)
    for name, p in peft.named_parameters():
        if "lora_B" in name:  # adapters that change the model
            p.data = 0.05 * torch.randn(p.shape, generator=g)
    return peft


@pytest.mark.parametrize("shared", [40, 0])
@pytest.mark.parametrize("kind", ["plain", "lora"])
def test_chunked_equals_full_logits_values_and_gradients(tiny_policy, monkeypatch, shared, kind):
    base, _ = tiny_policy
    model = copy.deepcopy(base) if kind == "plain" else _lora(base)
    model.train()
    batch = _batch(model.config.vocab_size, shared=shared)
    assert loss_free_prefix_length(model, batch) == (40 if shared else 0)
    assert not isinstance(lm_parts(model), str)
    chunked = _run(model, batch, True, monkeypatch)
    full = _run(model, batch, False, monkeypatch)
    _assert_same(chunked, full)
    scored = batch.mask > 0
    assert (chunked[0][~scored] == 0).all() and (chunked[0][scored] < 0).all()
    if kind == "lora":
        assert all("lora_" in n for n in chunked[3])


@pytest.mark.parametrize("kind", ["plain", "lora"])
def test_value_head_hidden_with_the_shared_prefix(tiny_policy, monkeypatch, kind):
    """PPO's forward: the chunked path keeps the shared prefix (its hidden states expanded over
    the rows); the full path runs every row whole. Same hidden, values and gradients."""
    base, _ = tiny_policy
    model = copy.deepcopy(base) if kind == "plain" else _lora(base)
    model.train()
    value = ValueHead(model.config.hidden_size)
    torch.nn.init.normal_(value.proj.weight, std=0.1)
    batch = _batch(model.config.vocab_size)
    chunked = _run(model, batch, True, monkeypatch, value)
    full = _run(model, batch, False, monkeypatch, value)
    assert chunked[2].shape == (*batch.input_ids.shape, model.config.hidden_size)
    _assert_same(chunked, full)


def test_lora_reference_is_the_base_with_adapters_off(tiny_policy, monkeypatch):
    base, _ = tiny_policy
    peft = _lora(base)
    batch = _batch(base.config.vocab_size)
    ref = forward.reference_logprobs(AdapterDisabled(peft), batch, 1.0)  # (B, T-1)
    plain = forward.reference_logprobs(base, batch, 1.0)
    with_adapters = forward.reference_logprobs(peft, batch, 1.0)
    assert torch.allclose(ref, plain, atol=1e-5)
    assert (ref - with_adapters).abs().max() > 1e-3  # the adapters do change the model
    monkeypatch.setattr(forward, "CHUNKED_HEAD", False)
    assert torch.allclose(forward.reference_logprobs(AdapterDisabled(peft), batch, 1.0), ref,
                          atol=1e-5)  # fmt: skip


class VocabWide(TorchDispatchMode):
    """Records the leading size (all dims but the last) of every tensor an op makes whose last
    dimension is the vocabulary."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.vocab, self.weight, self.rows = vocab, (hidden, vocab), []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or tuple(t.shape) == self.weight:
                continue  # the head's weight, transposed
            if t.dim() >= 2 and t.shape[-1] == self.vocab:
                self.rows.append(t.numel() // self.vocab)
        return out


@pytest.mark.parametrize("entropy_grad", [False, True])
def test_no_vocab_wide_tensor_beyond_one_chunk(tiny_policy, monkeypatch, entropy_grad):
    base, _ = tiny_policy
    model = copy.deepcopy(base).train()
    vocab = model.config.vocab_size
    batch = _batch(vocab)
    n_scored = int((batch.mask > 0).sum())
    calls = []
    model.lm_head.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
    for chunked in (True, False):
        monkeypatch.setattr(forward, "CHUNKED_HEAD", chunked)
        calls.clear()
        with VocabWide(vocab, model.config.hidden_size) as seen:
            logp, ent = forward_logprobs(model, batch, 1.0, True, entropy_grad)
            ((logp + ent) * batch.mask).sum().backward()
        if chunked:
            assert seen.rows and max(seen.rows) <= CHUNK  # (CHUNK, V) at most, ever
            forward_rows = calls[: -(-n_scored // CHUNK)]
            assert sum(forward_rows) == n_scored  # the head sees the loss positions only
            assert len(calls) == 2 * len(forward_rows)  # the backward recomputes each chunk
        else:  # the check can fail: the full path makes (B, T, V) logits
            assert max(seen.rows) >= 4 * (90 - 40)  # (B, T - shared, V)


class Bigram(torch.nn.Module):
    """A test double with only forward(): logits = table[input_ids]."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.table = torch.nn.Parameter(torch.randn(5, 5, generator=g))

    def forward(self, input_ids, attention_mask=None, output_hidden_states=False, **_):
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.table[input_ids])


def test_a_model_without_a_trunk_and_head_falls_back_to_full_logits():
    model = Bigram()
    assert "not a transformers PreTrainedModel" in lm_parts(model)
    ids = torch.tensor([[0, 1, 2, 3], [4, 3, 1, 0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
    batch = Batch(ids, torch.ones_like(ids), ids[:, 1:], mask, torch.zeros(2, 3))
    logp, _ = forward_logprobs(model, batch, 1.0)
    expect = torch.log_softmax(model.table[ids[:, :-1]], -1).gather(-1, ids[:, 1:, None])[..., 0]
    assert torch.allclose(logp, expect * mask)
    everywhere, _ = forward_logprobs(model, batch, 1.0, all_positions=True)
    assert torch.allclose(everywhere, expect)


def test_all_positions_scores_every_target_after_the_shared_prefix(tiny_policy, monkeypatch):
    model = copy.deepcopy(tiny_policy[0]).eval()
    batch = _batch(model.config.vocab_size)
    with torch.no_grad():
        chunked, _ = forward_logprobs(model, batch, 1.0, all_positions=True)
        monkeypatch.setattr(forward, "CHUNKED_HEAD", False)
        full, _ = forward_logprobs(model, batch, 1.0, all_positions=True)
    assert torch.allclose(chunked, full, atol=1e-5)
    assert (chunked[:, :40] == 0).all() and (chunked[:, 40:60] < 0).all()


# --- micro_batch_tokens: auto -------------------------------------------------------------

TINY = ModelShape(layers=3, hidden=192, kv_hidden=192, intermediate=768, heads=3, vocab=2048,
                  params=2_000_000, trainable=2_000_000)  # fmt: skip
SMOLLM2 = ModelShape(layers=30, hidden=576, kv_hidden=192, intermediate=1536, heads=9,
                     vocab=49_152, params=134_515_008, trainable=134_515_008)  # fmt: skip


def test_activation_bytes_per_token_by_hand():
    # tiny layer: 9*192 + 2*192 + 4*768 = 5184 floats; 3 layers + head 6*192 = 16704 floats
    assert memory.activation_bytes_per_token(TINY) == 4 * 16_704
    # checkpointing: 3*192 kept + one layer recomputed + head
    assert memory.activation_bytes_per_token(TINY, checkpointing=True) == 4 * (576 + 5184 + 1152)
    # full logits: 4 V per token instead of 6 H
    assert memory.activation_bytes_per_token(TINY, chunked=False) == 4 * (15_552 + 8192)
    # SmolLM2-135M: 30 * (5184 + 384 + 6144) + 3456 = 354,816 floats = 1.42 MB per token
    assert memory.activation_bytes_per_token(SMOLLM2) == 1_419_264
    assert memory.activation_bytes_per_token(SMOLLM2, act_bytes=2) == 709_632
    eager = ModelShape(**{**vars(TINY), "eager_attention": True})
    assert memory.activation_bytes_per_token(eager) == 4 * (16_704 + 3 * 2 * 3 * 4096)


def test_fixed_bytes_and_budget_by_hand():
    # chunk: 341 rows of 49,152 logits, 5 copies; 2 x params; grads; Adam moments if not there
    chunk = 5 * 341 * 49_152 * 4
    params = 134_515_008 * 4
    assert memory.fixed_bytes(SMOLLM2, optimizer_ready=True) == chunk + 3 * params
    assert memory.fixed_bytes(SMOLLM2, optimizer_ready=False) == chunk + 5 * params
    # 20 GB free: (10e9 - 3e9) / 1,419,264 bytes per token = 4932 tokens fit; rounded down to
    # a power of sqrt(2): 2**12 = 4096 (the next one, 2**12.5 = 5792, does not fit)
    assert memory.auto_token_budget(20_000_000_000, 1_419_264, 3_000_000_000) == 4096
    # a little more or less free memory, the same budget: 5932 and 6017 tokens fit -> 5792
    assert memory.auto_token_budget(20_000_000_000, 1_180_000, 3_000_000_000) == 5792
    assert memory.auto_token_budget(20_200_000_000, 1_180_000, 3_000_000_000) == 5792
    assert memory.auto_token_budget(19_000_000_000, 1_180_000, 3_000_000_000) == 4096  # 5508
    assert memory.auto_token_budget(2_000_000_000, 1_419_264, 3_000_000_000) == memory.MIN_BUDGET
    # the tiny model on 20 GB: 1.5e5 tokens would fit; the ceiling keeps the peak flat
    assert memory.auto_token_budget(20_000_000_000, 66_816, 10**8) == memory.MAX_BUDGET == 16_384


def test_resolve_token_budget_auto_once_per_model(tiny_policy, monkeypatch):
    model = copy.deepcopy(tiny_policy[0])
    assert memory.resolve_token_budget(0, model) == 0
    assert memory.resolve_token_budget(300, model) == 300
    monkeypatch.setattr(memory, "available_memory", lambda device: 2 * 2**30)
    s = memory.model_shape(model)
    assert (s.layers, s.hidden, s.intermediate, s.vocab) == (3, 192, 768, model.config.vocab_size)
    per_token = memory.activation_bytes_per_token(s)
    fits = (2**30 - memory.fixed_bytes(s, optimizer_ready=False)) / per_token
    expect = int(2 ** (math.floor(2 * math.log2(fits)) / 2))  # a power of sqrt(2)
    assert memory.MIN_BUDGET < expect <= fits < memory.MAX_BUDGET
    assert memory.resolve_token_budget("auto", model) == expect
    monkeypatch.setattr(memory, "available_memory", lambda device: 2**29)
    assert memory.resolve_token_budget("auto", model) == expect  # resolved once
    assert memory.resolve_token_budget("auto", Bigram()) == 0  # nothing to estimate from


def test_auto_budget_splits_the_update_into_micro_batches(tiny_policy, monkeypatch):
    model = copy.deepcopy(tiny_policy[0])
    monkeypatch.setattr(memory, "available_memory", lambda device: 0)  # -> MIN_BUDGET tokens
    monkeypatch.setattr(memory, "MIN_BUDGET", 200)
    batch = _batch(model.config.vocab_size)
    full, trunk = [], []
    model.register_forward_pre_hook(lambda m, a, kw: full.append(1), with_kwargs=True)
    model.model.register_forward_pre_hook(
        lambda m, a, kw: trunk.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    grpo_update(model, opt, batch, torch.tensor([1.0, -1.0, 0.5, 0.0]), clip_eps=0.2,
                kl_coef=0.0, loss_agg="token_mean", epochs=1, minibatches=1, max_grad_norm=1.0,
                temperature=1.0, rng=random.Random(0), token_budget="auto")  # fmt: skip
    # rows of 70, 82, 86, 90 tokens in 200-token pieces: [70, 82] (2 x 82) and [86, 90]; each
    # piece is a shared-prefix pass (1, 40) and a pass over its two rows' suffixes
    assert full == []  # the full model's forward (with its logits) never ran
    assert sorted(trunk) == [(1, 40), (1, 40), (2, 42), (2, 50)]


def test_cgroup_limit_caps_available_memory(tmp_path):
    (tmp_path / "memory.max").write_text(str(8 * 2**30))
    (tmp_path / "memory.current").write_text(str(5 * 2**30))
    (tmp_path / "memory.stat").write_text(f"anon 1\ninactive_file {2**30}\nactive_file 3\n")
    assert machine._cgroup_available(tmp_path) == 4 * 2**30
    (tmp_path / "memory.max").write_text("max\n")
    assert machine._cgroup_available(tmp_path) is None
    free = machine.available_memory("cpu")
    meminfo = Path("/proc/meminfo").read_text()
    total = int(meminfo.split("MemTotal:")[1].split()[0]) * 1024
    assert 0 < free <= total


def test_micro_batch_tokens_config():
    from agentrl.config import build_config

    assert build_config({}, []).algo.micro_batch_tokens == "auto"
    assert build_config({}, ["algo.micro_batch_tokens=4096"]).algo.micro_batch_tokens == 4096
    assert build_config({}, ["algo.micro_batch_tokens=0"]).algo.micro_batch_tokens == 0
    for bad in ("-1", "lots", "1.5"):
        with pytest.raises(Exception, match="algo.micro_batch_tokens"):
            build_config({}, [f"algo.micro_batch_tokens={bad}"])
