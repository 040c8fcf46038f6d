"""The tiny Mixture-of-Experts model: a fixture-size build (upcycled from the fixture model),
loaded through agentrl's policy loading, and one GRPO step of ``agentrl train`` logging the
routing metrics."""

import json

import pytest
import torch
from runhelpers import tiny_run_overrides

from agentrl.algos.moe import router_capture
from agentrl.config import build_config
from agentrl.policy.loading import load_policy
from agentrl.tiny.lock import MARKER
from agentrl.tiny.moe import build_tiny_moe
from agentrl.train import train


@pytest.fixture(scope="module")
def moe_dir(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("moe") / "tiny-moe"
    return build_tiny_moe(out, dense=tiny_dir, steps=1, batch_size=2, progress=False)


def test_tiny_moe_builds_upcycled_and_loads_as_a_policy(moe_dir, tiny_policy):
    assert "experts=4 top_k=2 steps=1" in (moe_dir / MARKER).read_text()
    model, tok = load_policy(str(moe_dir))
    assert type(model).__name__ == "Qwen2MoeForCausalLM"
    assert model.config.num_experts == 4 and model.config.num_experts_per_tok == 2
    capture = router_capture(model)
    assert capture is not None and capture.layers == [0, 1, 2]
    dense, dense_tok = tiny_policy
    ids = torch.tensor([dense_tok.encode("What is the weather in Paris?")])
    assert tok.encode("What is the weather in Paris?") == ids[0].tolist()  # same tokenizer
    with torch.no_grad():  # one continued-pretraining step away from the dense model
        gap = (model(ids).logits - dense(ids).logits).abs().max()
    assert 0 < float(gap) < 5.0


def test_one_grpo_step_logs_expert_shares_entropy_and_aux_loss(moe_dir, tmp_path):
    run = tmp_path / "run"
    cfg = build_config({}, [*tiny_run_overrides(moe_dir, run), "train.steps=1",
                            "algo.moe_aux_coef=0.05", "train.save_model=false"])  # fmt: skip
    train(cfg, progress=False)
    (m,) = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for layer in range(3):
        shares = [m[f"moe/expert_share/{layer}/{e}"] for e in range(4)]
        assert sum(shares) == pytest.approx(2.0)  # top-2: each policy token counted twice
        assert all(0.0 <= s <= 1.0 for s in shares)
        assert 0.0 < m[f"moe/router_entropy/{layer}"] <= torch.log(torch.tensor(4.0)) + 1e-6
    assert m["moe/aux_loss"] > 0 and 0.25 <= m["moe/collapse_share"] <= 1.0
    assert not any(k.startswith("loss/moe") for k in m)
