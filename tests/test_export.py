"""``agentrl export``: plain and quantized HF directories that serve and evaluate."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.export import MANIFEST, export_model, is_quantized, quantization_kind
from agentrl.policy.loading import load_policy

pytest.importorskip("torchao")

IDS = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 11]])


def _logits(model) -> torch.Tensor:  # (1, T, V)
    with torch.no_grad():
        return model(IDS).logits.float()


@pytest.fixture(scope="module")
def run_dir(tiny_dir, tmp_path_factory):
    """A run directory as the trainer leaves it: model/, config.yaml, rl_start.pt."""
    run = tmp_path_factory.mktemp("run")
    shutil.copytree(tiny_dir, run / "model")
    (run / "config.yaml").write_text(f"model:\n  name: {tiny_dir}\ntask:\n  env: weather\n")
    model, _ = load_policy(str(tiny_dir))
    start = {k: v.clone() for k, v in model.state_dict().items()}
    start["model.norm.weight"] = start["model.norm.weight"] * 0.5  # distinct from final
    (run / "checkpoints").mkdir()
    torch.save(start, run / "checkpoints" / "rl_start.pt")
    return run


def test_plain_export_is_the_same_model_with_the_run_settings(run_dir, tmp_path, tiny_policy):
    out = tmp_path / "plain"
    manifest = export_model(str(run_dir), out)
    assert manifest["quantize"] == "none" and manifest["bytes"] == manifest["source_bytes"]
    assert json.loads((out / MANIFEST).read_text())["source"] == str(run_dir)
    assert (out / "config.yaml").read_text() == (run_dir / "config.yaml").read_text()
    model, tok = load_policy(str(out))
    assert torch.equal(_logits(model), _logits(tiny_policy[0]))
    assert tok.chat_template == tiny_policy[1].chat_template


def test_start_weights_export_holds_the_rl_start_checkpoint(run_dir, tmp_path):
    export_model(str(run_dir), tmp_path / "start", weights="start")
    model, _ = load_policy(str(tmp_path / "start"))
    start = torch.load(run_dir / "checkpoints" / "rl_start.pt")
    assert torch.equal(model.state_dict()["model.norm.weight"], start["model.norm.weight"])


@pytest.mark.parametrize("native_bf16", ["1", "0"])
def test_int8_export_is_smaller_and_close(run_dir, tmp_path, tiny_policy, native_bf16, monkeypatch):
    from agentrl.export.quantize import Int8Linear

    monkeypatch.setenv("AGENTRL_NATIVE_BF16", native_bf16)
    out = tmp_path / "int8"
    manifest = export_model(str(run_dir), out, quantize="int8")
    assert manifest["bytes"] < 0.5 * manifest["source_bytes"]
    spec = json.loads((out / "config.json").read_text())["quantization_config"]
    assert spec["quant_method"] == "torchao"  # a plain from_pretrained can load it
    model, _ = load_policy(str(out))
    int8_layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
    if native_bf16 == "1":  # PyTorch's weight-only int8 kernel, the head included
        assert quantization_kind(model) == "int8" and isinstance(model.lm_head, Int8Linear)
        assert len(int8_layers) == 1 + 7 * len(model.model.layers)
    else:  # dequantized once: fp32 weights on the int8 grid
        assert not int8_layers and quantization_kind(model) == "none"
        from transformers import AutoModelForCausalLM

        raw = AutoModelForCausalLM.from_pretrained(out).model.layers[0].mlp.up_proj.weight
        w = model.model.layers[0].mlp.up_proj.weight  # (out, in)
        assert torch.equal(w, raw.dequantize()) and len(torch.unique(w[0])) <= 255
    ref, got = _logits(tiny_policy[0]), _logits(model)
    assert not torch.equal(ref, got)
    assert (ref - got).abs().max() < 0.05 * ref.abs().max()  # rounding, not a different model
    assert (ref.argmax(-1) == got.argmax(-1)).float().mean() >= 0.75


def test_int8_linear_matches_its_dequantized_weights():
    from agentrl.export.quantize import Int8Linear

    torch.manual_seed(0)
    dense = torch.nn.Linear(64, 48)
    layer = Int8Linear.from_dense(dense.weight, dense.bias)
    x = torch.randn(3, 5, 64)  # (B, T, in)
    w = layer.qdata.float() * layer.scale.float()[:, None]  # (out, in)
    expected = x.bfloat16().float() @ w.T + dense.bias
    got = layer(x)
    assert got.shape == (3, 5, 48) and got.dtype == torch.float32
    assert torch.allclose(got, expected, atol=0.05, rtol=0.02)
    # half a step of rounding, plus up to half a step from the scale's bf16 rounding
    assert (w - dense.weight).abs().max() <= layer.scale.float().max()


def test_a_quantized_export_refuses_training_and_a_second_export(run_dir, tmp_path):
    out = tmp_path / "int8"
    export_model(str(run_dir), out, quantize="int8")
    with pytest.raises(ValueError, match="quantized export.*cannot train"):
        load_policy(str(out), trainable=True)
    with pytest.raises(ValueError, match="already a quantized export"):
        export_model(str(out), tmp_path / "again", quantize="int8")


def test_int8_export_decodes_through_the_engine_without_a_copy(run_dir, tmp_path, monkeypatch):
    from agentrl.eval.api import load_eval_engine

    monkeypatch.setenv("AGENTRL_NATIVE_BF16", "1")  # where the int8 kernel is used

    export_model(str(run_dir), tmp_path / "int8", quantize="int8")
    engine = load_eval_engine(str(tmp_path / "int8"), "cpu")
    assert engine.decodes_own_weights and is_quantized(engine.decoding_model())
    prompt = engine.tokenizer("What is the weather in Paris?")["input_ids"]
    first, again = (engine.generate([prompt], max_new_tokens=6, greedy=True)[0] for _ in "ab")
    assert first.ids == again.ids and len(first.ids) >= 1
    assert all(lp <= 0.0 for lp in first.logprobs)


def test_nf4_export_loads_and_decodes(run_dir, tmp_path, tiny_policy):
    pytest.importorskip("bitsandbytes")
    out = tmp_path / "nf4"
    manifest = export_model(str(run_dir), out, quantize="nf4")
    assert manifest["bytes"] < 0.5 * manifest["source_bytes"]
    model, _ = load_policy(str(out))
    assert quantization_kind(model) == "nf4"
    ref, got = _logits(tiny_policy[0]), _logits(model)
    assert (ref.argmax(-1) == got.argmax(-1)).float().mean() >= 0.5


def test_cli_export_errors_name_the_problem(run_dir, tmp_path):
    runner = CliRunner()
    out = tmp_path / "x"
    ok = runner.invoke(app, ["export", str(run_dir), "--out", str(out), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout.strip().splitlines()[-1])["quantize"] == "none"
    again = runner.invoke(app, ["export", str(run_dir), "--out", str(out)])
    assert again.exit_code == 2 and "not empty" in again.output
    bad = runner.invoke(app, ["export", str(run_dir), "--out", str(tmp_path / "y"),
                              "--quantize", "int3"])  # fmt: skip
    assert bad.exit_code == 2 and "int3" in bad.output
    forced = runner.invoke(app, ["export", str(run_dir), "--out", str(out), "--force",
                                 "--weights", "start"])  # fmt: skip
    assert forced.exit_code == 0, forced.output
    assert json.loads((out / MANIFEST).read_text())["weights"] == "start"
