"""LoRA via peft: only adapters train, LR is 1/5 of the full rate, merged == base + adapter."""

import random

import pytest
import torch
from runhelpers import tiny_run_overrides

from agentrl.algos.batch import Batch
from agentrl.algos.grpo import grpo_update
from agentrl.config import build_config
from agentrl.policy.lora import apply_lora
from agentrl.train.build import build_optimizer, build_rl_models


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _lora_cfg(tiny_dir, run, *extra):
    return build_config(
        {},
        [
            *tiny_run_overrides(tiny_dir, run),
            "lora.enabled=true",
            "lora.rank=4",
            *extra,
        ],
    )


def test_only_adapter_weights_change_and_lr_is_one_fifth(tiny_dir, tmp_path):
    from agentrl.policy.loading import load_policy

    model, _ = load_policy(str(tiny_dir))
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = _lora_cfg(tiny_dir, tmp_path, "algo.kl.coef=0.1", "algo.lr=1e-2")
    rl = build_rl_models(model, cfg)
    optimizer = build_optimizer(rl, cfg)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-2 / 5)
    trainable = [n for n, p in rl.policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    ids = torch.randint(0, 2000, (2, 12))
    mask = torch.zeros(2, 11)
    mask[:, 5:] = 1.0
    batch = Batch(ids, torch.ones_like(ids), ids[:, 1:], mask, torch.full((2, 11), -7.0))
    from agentrl.algos.forward import reference_logprobs

    batch = batch.with_reference(reference_logprobs(rl.ref, batch, 1.0))  # adapters off = base
    stats = grpo_update(
        rl.policy, optimizer, batch, torch.tensor([1.0, -1.0]), clip_eps=0.2, kl_coef=0.1,
        loss_agg="token_mean", epochs=2, minibatches=1, max_grad_norm=1.0, temperature=1.0,
        rng=random.Random(0),
    )  # fmt: skip
    assert stats["updates"] == 2.0
    changed, frozen_changed = [], []
    for n, p in rl.policy.named_parameters():
        if "lora_" in n:
            if "lora_B" in n and not torch.equal(p, torch.zeros_like(p)):
                changed.append(n)
        else:
            plain = n.replace("base_model.model.", "").replace(".base_layer", "")
            if not torch.equal(p, base[plain]):
                frozen_changed.append(n)
    assert changed and frozen_changed == []


def test_lora_run_saves_adapter_and_merged_model_equal_to_base_plus_adapter(tiny_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from agentrl.checkpoint import latest_checkpoint, load_checkpoint
    from agentrl.train import train

    run = tmp_path / "lora"
    cfg = _lora_cfg(
        tiny_dir, run, "algo.name=ppo", "train.steps=2", "train.checkpoint_every=2",
        "algo.lr=5e-3", "algo.kl.coef=0.05",
        "algo.entropy_coef=0.05",  # a gradient even when every episode scores 0
    )  # fmt: skip
    train(cfg, progress=False)
    parts = load_checkpoint(latest_checkpoint(run / "checkpoints"))
    assert parts["policy"] and all("lora_" in n for n in parts["policy"])  # adapters only
    assert parts["optimizer"]["param_groups"][0]["lr"] == pytest.approx(5e-3 / 5)
    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    adapted = PeftModel.from_pretrained(base, run / "adapter").eval()
    lora_b = [p for n, p in adapted.named_parameters() if "lora_B" in n]
    assert any(p.abs().sum() > 0 for p in lora_b)  # RL moved the adapter
    merged = AutoModelForCausalLM.from_pretrained(run / "model").eval()
    ids = torch.randint(0, 2000, (2, 16))
    with torch.no_grad():
        want = adapted(input_ids=ids).logits
        got = merged(input_ids=ids).logits
        plain = AutoModelForCausalLM.from_pretrained(tiny_dir)(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, plain, atol=1e-5)  # and the merge did change the model


def test_bad_target_module_names_the_field(tiny_dir):
    from agentrl.policy.loading import load_policy

    model, _ = load_policy(str(tiny_dir))
    with pytest.raises(ValueError, match="lora.target_modules"):
        apply_lora(model, rank=2, alpha=4, dropout=0.0, target_modules=["qkv_proj"])


def test_lora_resume_continues_exactly(tiny_dir, tmp_path):
    """A LoRA run stopped by SIGTERM and resumed ends with the same adapter as a straight run
    (the frozen base comes back from rl_start.pt, the adapter from the checkpoint)."""
    import os
    import signal

    from safetensors.torch import load_file

    from agentrl.train import train

    extra = ("algo.name=ppo", "train.steps=3", "algo.lr=5e-3", "algo.kl.coef=0.05")
    train(_lora_cfg(tiny_dir, tmp_path / "straight", *extra), progress=False)

    def send_term(n):
        if n == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    cfg = _lora_cfg(tiny_dir, tmp_path / "stopped", *extra)
    assert train(cfg, progress=False, on_step=send_term)["interrupted"]
    train(cfg, progress=False, resume=True)
    a = load_file(tmp_path / "straight" / "adapter" / "adapter_model.safetensors")
    b = load_file(tmp_path / "stopped" / "adapter" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
