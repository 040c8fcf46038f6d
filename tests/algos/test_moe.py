"""algos.moe: the masked load-balancing loss and routing metrics against hand-computed numbers,
the router capture on an upcycled MoE (shared-prefix forwards included), the GRPO loss hook
(no effect on dense models, none with coefficient 0) and the collapse alert."""

import math

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from agentrl.algos.batch import Batch, Signals
from agentrl.algos.grpo import grpo_micro_loss
from agentrl.algos.losses import grpo_loss
from agentrl.algos.moe import load_balancing_loss, routed_mask, router_capture, routing_stats
from agentrl.config import build_config
from agentrl.monitor.alerts import check_rule
from agentrl.tiny.moe import upcycle

# 3 tokens, 2 experts; the last token is masked out
PROBS = torch.tensor([[0.75, 0.25], [0.6, 0.4], [0.1, 0.9]])
LOGITS = PROBS.log()  # softmax(log p) = p


def test_aux_loss_by_hand_excludes_masked_tokens():
    # kept tokens 0, 1 both pick expert 0: f = [1, 0]; P = [(.75+.6)/2, (.25+.4)/2]
    mask = torch.tensor([1.0, 1.0, 0.0])
    aux = load_balancing_loss([LOGITS], mask, top_k=1)
    assert float(aux) == pytest.approx(2 * (1.0 * 0.675 + 0.0 * 0.325), abs=1e-6)  # 1.35
    # the masked token counted: f = [2/3, 1/3], P = [1.45/3, 1.55/3] -> 0.98889
    everything = load_balancing_loss([LOGITS], torch.ones(3), top_k=1)
    assert float(everything) == pytest.approx(2 * (2 / 3 * 1.45 / 3 + 1 / 3 * 1.55 / 3), abs=1e-6)
    # two layers are averaged; no kept token gives 0
    two = load_balancing_loss([LOGITS, LOGITS.flip(-1)], mask, top_k=1)
    assert float(two) == pytest.approx((1.35 + 1.35) / 2, abs=1e-6)
    assert float(load_balancing_loss([LOGITS], torch.zeros(3), top_k=1)) == 0.0


def test_aux_loss_is_one_when_balanced_and_e_over_k_when_collapsed():
    uniform = torch.zeros(6, 4)  # P = 1/4 each: the loss is 1 whatever the counts f
    balanced = torch.tensor([[2.0, 2.0, 0, 0], [0, 0, 2.0, 2.0]]).repeat(3, 1)  # f = 1/4 each
    assert float(load_balancing_loss([uniform], torch.ones(6), 2)) == pytest.approx(1.0)
    assert float(load_balancing_loss([balanced], torch.ones(6), 2)) == pytest.approx(1.0)
    collapsed = torch.tensor([[30.0, 30.0, 0.0, 0.0]]).repeat(6, 1)  # p ~ [.5, .5, 0, 0]
    assert float(load_balancing_loss([collapsed], torch.ones(6), 2)) == pytest.approx(2.0)


def test_aux_loss_gradient_flows_through_the_router_probabilities():
    logits = LOGITS.clone().requires_grad_(True)
    load_balancing_loss([logits], torch.tensor([1.0, 1.0, 0.0]), top_k=1).backward()
    # d/dz of 2 * f . mean(p) with f = [1, 0]: 2 * p0 * (1 - p0) / 2 for expert 0, token 0
    assert float(logits.grad[0, 0]) == pytest.approx(0.75 * 0.25, abs=1e-6)
    assert float(logits.grad[2].abs().sum()) == 0.0  # the masked token gets no gradient


def test_routing_stats_by_hand():
    stats = routing_stats([LOGITS, LOGITS.flip(-1)], torch.tensor([1.0, 1.0, 0.0]), 1, [0, 3])
    assert stats["moe/expert_share/0/0"] == 1.0 and stats["moe/expert_share/0/1"] == 0.0
    assert stats["moe/expert_share/3/1"] == 1.0  # layer names come from the model's layers
    h = lambda p: -(p * math.log(p) + (1 - p) * math.log(1 - p))  # noqa: E731
    assert stats["moe/router_entropy/0"] == pytest.approx((h(0.75) + h(0.6)) / 2, abs=1e-6)
    assert "moe/collapse_share" not in stats  # 2 experts: a share of 0.5 is balance
    four = torch.tensor([[3.0, 2.0, 1.0, 0.0]] * 3 + [[0.0, 1.0, 2.0, 3.0]])  # (4, 4)
    stats = routing_stats([four], torch.ones(4), 2, [0])
    shares = [stats[f"moe/expert_share/0/{e}"] for e in range(4)]
    assert shares == [0.75, 0.75, 0.25, 0.25] and sum(shares) == 2  # top-k counted
    assert stats["moe/collapse_share"] == 0.75  # expert 0 is the first choice of 3 of 4


def test_routed_mask_drops_the_shared_prefix_and_aligns_scored_positions():
    mask = torch.tensor([[0.0, 0, 1, 1], [0, 0, 0, 1]])  # (B=2, T-1=4): targets 2, 3 / 3
    flat = routed_mask(mask, 5, 2 * 3)  # the forward saw positions 2..4 of each row
    assert flat.tolist() == [1, 1, 0, 0, 1, 0]
    with pytest.raises(ValueError, match="multiple of the batch size"):
        routed_mask(mask, 5, 7)


def _dense(seed=0):
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, pad_token_id=0,
                         max_position_embeddings=128)  # fmt: skip
    return Qwen2ForCausalLM(config).float().eval()


def _batch(ids: torch.Tensor, first_scored: int) -> Batch:
    b, t = ids.shape
    mask = torch.zeros(b, t - 1)
    mask[:, first_scored:] = 1.0
    mask[1, -2:] = 0.0  # the second row is shorter in the loss
    return Batch(ids, torch.ones_like(ids), ids[:, 1:], mask, torch.full((b, t - 1), -3.0))


def test_upcycled_moe_equals_the_dense_model_and_exposes_its_routers():
    dense = _dense()
    moe = upcycle(dense, num_experts=4, top_k=2, shared_size=8).eval()
    ids = torch.randint(1, 64, (2, 12))
    with torch.no_grad():
        assert torch.allclose(dense(ids).logits, moe(ids).logits, atol=1e-5)
    capture = router_capture(moe)
    assert capture.layers == [0, 1] and capture.top_k == 2
    assert router_capture(dense) is None


def test_captured_routers_match_transformers_router_logits_with_a_shared_prefix():
    from agentrl.algos.forward import forward_logprobs

    moe = upcycle(_dense(), num_experts=4, top_k=2, shared_size=8).eval()
    ids = torch.randint(1, 64, (2, 48))
    ids[1, :40] = ids[0, :40]  # 40 shared tokens: computed once (>= MIN_SHARED_PREFIX)
    batch = _batch(ids, first_scored=41)
    capture = router_capture(moe)
    with torch.no_grad(), capture:
        forward_logprobs(moe, batch, 1.0)
    assert len(capture.logits) == 4  # the prefix forward, then the suffix forward
    aux, stats = capture.term(batch)
    with torch.no_grad():
        full = moe(input_ids=ids, output_router_logits=True).router_logits  # (2 * 48, 4) each
    mask = torch.cat([batch.mask, torch.zeros(2, 1)], dim=1).reshape(-1)  # (2 * 48,)
    assert float(aux) == pytest.approx(float(load_balancing_loss(list(full), mask, 2)), abs=1e-5)
    for layer in (0, 1):
        shares = [stats[f"moe/expert_share/{layer}/{e}"] for e in range(4)]
        assert sum(shares) == pytest.approx(2.0)


def _micro_loss_value(model, batch, coef):
    micro = grpo_micro_loss(model, clip_eps=0.2, kl_coef=0.0, loss_agg="token_mean",
                            temperature=1.0, moe_aux_coef=coef)  # fmt: skip
    loss, stats = micro(batch, Signals(torch.tensor([1.0, -0.5])), 1.0, 1.0)
    return loss, stats


def test_grpo_loss_gets_the_aux_term_only_for_moe_models_with_a_coefficient():
    from agentrl.algos.forward import forward_logprobs

    torch.manual_seed(1)
    ids = torch.randint(1, 64, (2, 10))
    batch = _batch(ids, first_scored=4)
    dense = _dense()
    base_dense, stats_dense = _micro_loss_value(dense, batch, 0.0)
    with_coef, _ = _micro_loss_value(dense, batch, 0.05)
    assert float(with_coef.detach()) == float(base_dense.detach())  # dense: no effect, no metrics
    assert not any(k.startswith("moe/") for k in stats_dense)
    moe = upcycle(dense, num_experts=4, top_k=2, shared_size=8)
    zero, stats = _micro_loss_value(moe, batch, 0.0)
    logp, _ = forward_logprobs(moe, batch, 1.0)
    plain, _ = grpo_loss(logp, batch.old_logp, None, torch.tensor([1.0, -0.5]), batch.mask,
                         0.2, 0.0, "token_mean", "k3", None)  # fmt: skip
    zero, plain = float(zero.detach()), float(plain.detach())
    assert zero == plain  # coefficient 0: the RL loss as it is
    assert zero == pytest.approx(float(base_dense.detach()), abs=1e-5)  # upcycled = dense
    loaded, stats5 = _micro_loss_value(moe, batch, 0.05)
    assert stats5["moe/aux_loss"] == stats["moe/aux_loss"] > 0
    assert float(loaded.detach()) == pytest.approx(zero + 0.05 * stats["moe/aux_loss"], abs=1e-6)
    loaded.backward()
    assert moe.model.layers[0].mlp.gate.weight.grad.abs().sum() > 0  # the router learns


def test_collapse_alert_fires_on_a_collapsed_router_only():
    (rule,) = [r for r in build_config().monitor.alerts if r.name == "moe_collapse"]
    collapsed = routing_stats([torch.tensor([[5.0, 1.0, 0.0, 0.0]]).repeat(8, 1)],
                              torch.ones(8), 2, [0])  # fmt: skip
    balanced = routing_stats([torch.eye(4).repeat(2, 1) * 5.0], torch.ones(8), 2, [0])
    assert collapsed["moe/collapse_share"] == 1.0 and balanced["moe/collapse_share"] == 0.25
    assert check_rule(rule, [collapsed] * 3) is not None
    assert check_rule(rule, [balanced] * 3) is None
    assert check_rule(rule, [{"loss/kl": 0.1}] * 3) is None  # a dense run never fires


def test_ppo_loss_gets_the_same_aux_term_on_its_policy_part():
    from agentrl.algos.ppo import ppo_micro_loss
    from agentrl.algos.value import Critic

    torch.manual_seed(2)
    batch = _batch(torch.randint(1, 64, (2, 10)), first_scored=4)
    moe = upcycle(_dense(), num_experts=4, top_k=2, shared_size=8)
    critic = Critic(32)
    zeros = torch.zeros(2, 9)
    sig = Signals(torch.full((2, 9), 0.5), zeros, zeros, batch.mask)
    losses = {}
    for coef in (0.0, 0.05):
        micro = ppo_micro_loss(
            moe, critic, clip_eps=0.2, value_clip=None, vf_coef=0.5, kl_coef=0.0, kl_kind="k3",
            entropy_coef=0.0, loss_agg="token_mean", temperature=1.0, moe_aux_coef=coef,
        )  # fmt: skip
        loss, stats = micro(batch, sig, 0.5, 1.0)  # the policy part weighs 0.5 here
        losses[coef] = (float(loss.detach()), stats)
    aux = losses[0.0][1]["moe/aux_loss"] / 0.5  # stats carry the policy share
    assert aux > 0 and losses[0.05][1]["moe/aux_loss"] == pytest.approx(0.5 * aux)
    assert losses[0.05][0] == pytest.approx(losses[0.0][0] + 0.5 * 0.05 * aux, abs=1e-6)


def test_moe_aux_coef_defaults_to_the_seeds_low_end_and_refuses_negatives():
    from agentrl.config import ConfigError

    assert build_config().algo.moe_aux_coef == 0.01
    assert build_config(overrides=["algo.moe_aux_coef=0.05"]).algo.moe_aux_coef == 0.05
    with pytest.raises(ConfigError, match="algo.moe_aux_coef"):
        build_config(overrides=["algo.moe_aux_coef=-0.1"])
