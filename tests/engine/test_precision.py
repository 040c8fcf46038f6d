"""Decoding precision: where bf16 is native the engine decodes a bf16 copy of the policy
(parameters cast, buffers kept), refreshed from the policy on every call, and the trainer
recomputes the old log-probs with the policy itself."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from runhelpers import tiny_run_overrides

from agentrl import machine
from agentrl.algos.batch import Batch
from agentrl.algos.forward import reference_logprobs
from agentrl.chat.render import encode_prompt, stop_token_ids
from agentrl.config import build_config
from agentrl.engine.decoder import Engine
from agentrl.engine.shadow import decode_dtype, make_shadow
from agentrl.envs import make
from agentrl.precision import autocast_dtype
from agentrl.train import train
from agentrl.train.step import with_policy_logprobs


def test_native_bf16_reads_the_cpu_flags_and_the_override(monkeypatch):
    monkeypatch.delenv("AGENTRL_NATIVE_BF16", raising=False)
    monkeypatch.setattr(machine, "_cpu_flags", lambda: {"avx2", "amx_bf16"})
    assert machine.native_bf16("cpu")
    monkeypatch.setattr(machine, "_cpu_flags", lambda: {"avx2", "avx512f"})
    assert not machine.native_bf16("cpu")
    monkeypatch.setenv("AGENTRL_NATIVE_BF16", "1")
    assert machine.native_bf16("cpu")
    assert autocast_dtype("auto", "cpu") == torch.bfloat16
    assert autocast_dtype("off", "cpu") is None
    monkeypatch.setenv("AGENTRL_NATIVE_BF16", "0")
    assert autocast_dtype("auto", "cpu") is None


def test_decode_dtype_resolution(tiny_policy, monkeypatch):
    model, _ = tiny_policy  # fp32
    monkeypatch.setenv("AGENTRL_NATIVE_BF16", "1")
    assert decode_dtype("auto", model, "cpu") == torch.bfloat16
    assert decode_dtype("float32", model, "cpu") is None  # the policy itself
    monkeypatch.setenv("AGENTRL_NATIVE_BF16", "0")
    assert decode_dtype("auto", model, "cpu") is None
    assert decode_dtype("bfloat16", model, "cpu") == torch.bfloat16


def test_shadow_casts_parameters_keeps_buffers_and_follows_the_policy(tiny_policy):
    model, tok = tiny_policy
    model = copy.deepcopy(model)
    shadow = make_shadow(model, torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in shadow.parameters())
    float_buffers = [b for b in model.buffers() if b.is_floating_point()]
    assert float_buffers  # the rotary inverse frequencies
    assert all(b.dtype == torch.float32 for b in shadow.buffers() if b.is_floating_point())

    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id, dtype=torch.bfloat16)
    assert not engine.decodes_own_weights
    first = engine.decoding_model()
    with torch.no_grad():  # an "update"
        for p in model.parameters():
            p.add_(0.01)
    again = engine.decoding_model()
    assert again is first  # one copy, refreshed in place
    for dst, src in zip(again.parameters(), model.parameters(), strict=True):
        assert torch.equal(dst, src.to(torch.bfloat16))
    engine.model = copy.deepcopy(model)  # a new policy (e.g. wrapped in LoRA) drops the copy
    assert engine.decoding_model() is not first
    assert Engine(model, tok, [0], 0, dtype=torch.float32).decodes_own_weights


def test_bf16_decoding_samples_near_the_fp32_policy(tiny_policy):
    """Greedy tokens' recorded log-probs from the bf16 copy are within bf16 rounding of the
    fp32 policy's own (and not identical: the copy really decodes)."""
    model, tok = tiny_policy
    env = make("weather")
    msgs, _ = env.reset(seed=3, options={"level": 1})
    prompt = encode_prompt(tok, msgs, env.tool_schemas)
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id, dtype=torch.bfloat16)
    sample = engine.generate([prompt], max_new_tokens=12, greedy=True)[0]
    ids = prompt + sample.ids
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    own = torch.stack([logp[len(prompt) + i - 1, t] for i, t in enumerate(sample.ids)])
    gap = (torch.tensor(sample.logprobs) - own).abs()
    assert float(gap.max()) < 0.1
    assert float(gap.max()) > 0


def test_with_policy_logprobs_replaces_the_old_logprobs_and_reports_the_gap(tiny_policy):
    model, _ = tiny_policy
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (3, 40), generator=g)  # (B, T)
    mask = torch.zeros(3, 39)
    mask[:, 20:] = 1
    old = torch.full((3, 39), -1.0)
    batch = Batch(ids, torch.ones_like(ids), ids[:, 1:], mask, old)
    out, stats = with_policy_logprobs(model, batch, 1.0)
    own = reference_logprobs(model, batch, 1.0)
    assert torch.equal(out.old_logp, own)
    expected = float((own[:, 20:] + 1.0).abs().mean())
    assert stats["rollout/logprob_gap"] == pytest.approx(expected, rel=1e-6)


def test_a_training_step_with_bf16_decoding_uses_the_policys_logprobs(tiny_dir, tmp_path,
                                                                     monkeypatch):  # fmt: skip
    monkeypatch.setenv("AGENTRL_NATIVE_BF16", "1")
    run = tmp_path / "run"
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, run), "train.steps=1",
                            "train.save_model=false"])  # fmt: skip
    train(cfg, progress=False)
    line = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert 0 < line["rollout/logprob_gap"] < 0.5


def test_an_engine_in_its_own_dtype_decodes_an_episode_the_same_whatever_shares_its_batch(
    tiny_policy,
):
    """Evaluation's engine (``in_own_dtype``) decodes the fp32 policy itself: a prompt's greedy
    tokens and log-probs are those of the policy, alone or among other prompts."""
    model, tok = tiny_policy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id, dtype=torch.bfloat16)
    exact = engine.in_own_dtype()
    assert exact.dtype is None and exact.decoding_model() is model
    assert exact.in_own_dtype() is exact and exact.slots == engine.slots
    env = make("weather")
    prompts = []
    for seed in range(4):
        msgs, _ = env.reset(seed=seed, options={"level": 1 + seed % 3})
        prompts.append(encode_prompt(tok, msgs, env.tool_schemas))
    alone = exact.generate(prompts[:1], max_new_tokens=16, greedy=True)[0]
    together = exact.generate(prompts, max_new_tokens=16, greedy=True)[0]
    assert alone.ids == together.ids
    assert torch.allclose(torch.tensor(alone.logprobs), torch.tensor(together.logprobs),
                          atol=1e-5)  # fmt: skip
    ids = prompts[0] + alone.ids
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    own = torch.stack([logp[len(prompts[0]) + i - 1, t] for i, t in enumerate(alone.ids)])
    assert float((torch.tensor(alone.logprobs) - own).abs().max()) < 1e-4  # not bf16's 1e-2


@pytest.mark.parametrize(("eval_dtype", "decoded"), [("policy", None), ("rollout", torch.bfloat16)])
def test_a_run_evaluates_with_the_policys_own_weights_unless_told(
    tiny_dir, tmp_path, monkeypatch, eval_dtype, decoded
):
    import agentrl.train.run as run_module

    monkeypatch.setenv("AGENTRL_NATIVE_BF16", "1")  # the rollouts decode a bf16 copy
    seen = []
    real = run_module.evaluate

    def spy(generator, *args, **kwargs):
        seen.append(generator.dtype)
        return real(generator, *args, **kwargs)

    monkeypatch.setattr(run_module, "evaluate", spy)
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, tmp_path / "run"), "train.steps=0",
                            "train.eval_episodes=2", f"train.eval_dtype={eval_dtype}",
                            "train.save_model=false"])  # fmt: skip
    train(cfg, progress=False)
    assert seen and all(d == decoded for d in seen)


def test_agentrl_eval_decodes_the_policy_itself_and_the_server_a_bf16_copy(tiny_dir, monkeypatch):
    from agentrl.eval.weights import load_eval_engine

    monkeypatch.setenv("AGENTRL_NATIVE_BF16", "1")
    assert load_eval_engine(str(tiny_dir), "cpu").dtype is None
    assert load_eval_engine(str(tiny_dir), "cpu", exact=False).dtype == torch.bfloat16
