"""GAE and PPO targets against numbers worked out by hand (gamma 0.9, lambda 0.8)."""

import pytest
import torch

from agentrl.algos.gae import gae, whiten
from agentrl.algos.losses import clipped_policy_loss, clipped_value_loss
from agentrl.algos.ppo import ppo_targets

G, L = 0.9, 0.8


def test_gae_three_turn_episode_terminated_and_truncated():
    # turns 0, 1, 2; reward 1 at the end of the last turn; V(s_t) = 0.5, 0.6, 0.8
    r = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    v = torch.tensor([[0.5, 0.6, 0.8], [0.5, 0.6, 0.8]])
    m = torch.ones(2, 3)
    boot = torch.tensor([0.0, 0.7])  # row 0 terminated; row 1 truncated, V(s_end) = 0.7
    adv, ret = gae(r, v, m, boot, G, L)
    # terminated: d2 = 1 - 0.8 = 0.2; d1 = 0.9*0.8 - 0.6 = 0.12; d0 = 0.9*0.6 - 0.5 = 0.04
    # A2 = 0.2; A1 = 0.12 + 0.72*0.2 = 0.264; A0 = 0.04 + 0.72*0.264 = 0.23008
    assert torch.allclose(adv[0], torch.tensor([0.23008, 0.264, 0.2]), atol=1e-6)
    assert torch.allclose(ret[0], torch.tensor([0.73008, 0.864, 1.0]), atol=1e-6)
    # truncated: d2 = 1 + 0.9*0.7 - 0.8 = 0.83; A1 = 0.12 + 0.72*0.83 = 0.7176;
    # A0 = 0.04 + 0.72*0.7176 = 0.556672
    assert torch.allclose(adv[1], torch.tensor([0.556672, 0.7176, 0.83]), atol=1e-6)


def test_gae_padding_rows_of_different_length():
    r = torch.tensor([[0.0, 1.0, 9.0]])  # the 9 sits on padding and must be ignored
    v = torch.tensor([[0.2, 0.4, 9.0]])
    adv, ret = gae(r, v, torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([0.0]), G, L)
    # d1 = 1 - 0.4 = 0.6; d0 = 0.9*0.4 - 0.2 = 0.16; A0 = 0.16 + 0.72*0.6 = 0.592
    assert torch.allclose(adv, torch.tensor([[0.592, 0.6, 0.0]]), atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.792, 1.0, 0.0]]), atol=1e-6)


# One episode of 7 tokens: prompt, prompt, turn 0, turn 0, tool output, turn 1, turn 1.
# Targets t = 0..5 predict tokens 1..6; their turn ids are turn_of_token[1:].
TURNS = torch.tensor([[-1, 0, 0, -1, 1, 1]])
VALUES = torch.tensor([[0.0, 0.5, 0.9, 0.0, 0.6, 0.9, 0.7]])  # V at positions 0..6
ONE = torch.tensor([True])


def _targets(bootstrap=False, kl=None, level="turn"):
    return ppo_targets(
        VALUES,
        TURNS,
        torch.tensor([7]),
        torch.tensor([1.0]),
        ONE,
        torch.tensor([bootstrap]),
        kl,
        G,
        L,
        level,
    )


def test_turn_level_targets_by_hand():
    adv, ret, vmask = _targets()
    # turn values V[1] = 0.5, V[4] = 0.6: A1 = 1 - 0.6 = 0.4; A0 = 0.9*0.6 - 0.5 + 0.72*0.4
    assert torch.allclose(adv, torch.tensor([[0.0, 0.328, 0.328, 0.0, 0.4, 0.4]]), atol=1e-6)
    assert torch.equal(vmask, torch.tensor([[0.0, 1.0, 0.0, 0.0, 1.0, 0.0]]))
    assert torch.allclose(ret, torch.tensor([[0.0, 0.828, 0.0, 0.0, 1.0, 0.0]]), atol=1e-6)


def test_turn_level_truncated_bootstraps_from_last_position():
    adv, _, _ = _targets(bootstrap=True)
    # V(s_end) = V[6] = 0.7: d1 = 1 + 0.63 - 0.6 = 1.03; A0 = 0.04 + 0.72*1.03 = 0.7816
    assert torch.allclose(adv[0, [1, 4]], torch.tensor([0.7816, 1.03]), atol=1e-6)


def test_turn_level_kl_penalty_summed_per_turn():
    kl = torch.tensor([[0.0, 0.1, 0.2, 0.0, 0.05, 0.05]])
    adv, _, _ = _targets(kl=kl)
    # turn rewards -0.3 and 1 - 0.1 = 0.9: A1 = 0.9 - 0.6 = 0.3; A0 = -0.3 + 0.54 - 0.5 + 0.216
    assert torch.allclose(adv[0, [1, 4]], torch.tensor([-0.044, 0.3]), atol=1e-6)


def test_token_level_targets_discount_only_across_turns():
    adv, ret, vmask = _targets(level="token")
    # steps at targets 1, 2, 4, 5 with V 0.5, 0.9, 0.6, 0.9; discount 1 inside a turn
    # A3 = 1 - 0.9 = 0.1; A2 = 0.9 - 0.6 + 0.8*0.1 = 0.38
    # A1 = 0.9*0.6 - 0.9 + 0.72*0.38 = -0.0864; A0 = 0.9 - 0.5 + 0.8*(-0.0864) = 0.33088
    want = torch.tensor([[0.0, 0.33088, -0.0864, 0.0, 0.38, 0.1]])
    assert torch.allclose(adv, want, atol=1e-6)
    assert torch.equal(vmask, torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0, 1.0]]))


def test_invalid_rows_get_nothing():
    adv, ret, vmask = ppo_targets(
        VALUES, TURNS, torch.tensor([7]), torch.tensor([1.0]), torch.tensor([False]),
        torch.tensor([False]), None, G, L, "turn",
    )  # fmt: skip
    assert adv.abs().sum() == 0 and ret.abs().sum() == 0 and vmask.sum() == 0


def test_bad_level_names_the_field():
    with pytest.raises(ValueError, match="algo.ppo.gae_level"):
        _targets(level="episode")


def test_whiten_over_mask():
    x = torch.tensor([[1.0, 3.0, 100.0]])
    out = whiten(x, torch.tensor([[1.0, 1.0, 0.0]]))
    # mean 2, population std 1 -> (-1, +1), padding 0
    assert torch.allclose(out, torch.tensor([[-1.0, 1.0, 0.0]]), atol=1e-4)


def test_clipped_policy_loss_per_token_advantages_by_hand():
    logp = torch.tensor([[-0.5, -2.0, -1.0]])
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    adv = torch.tensor([[1.0, -1.0, -2.0]])
    loss, stats = clipped_policy_loss(logp, old, adv, torch.ones(1, 3), clip_eps=0.2)
    # tok0: ratio e^0.5 = 1.6487 -> min(1.6487, 1.2) * 1 = 1.2
    # tok1: ratio 1 -> -1; tok2: ratio e^-0.5 = 0.6065 -> min(-1.2131, 0.8 * -2 = -1.6) = -1.6
    # loss = -(1.2 - 1 - 1.6) / 3 = 0.466667; tokens 0 and 2 clipped
    assert loss.item() == pytest.approx(1.4 / 3, abs=1e-5)
    assert stats["clip_frac"].item() == pytest.approx(2 / 3)


def test_clipped_value_loss_by_hand():
    v = torch.tensor([[1.0, 0.0, 0.9]])
    old = torch.tensor([[0.5, 0.5, 0.5]])
    ret = torch.tensor([[0.8, 0.9, 1.0]])
    loss, stats = clipped_value_loss(v, old, ret, torch.ones(1, 3), clip=0.2)
    # tok0: (1-0.8)^2 = 0.04 vs (0.7-0.8)^2 = 0.01 -> 0.04
    # tok1: 0.81 vs (0.3-0.9)^2 = 0.36 -> 0.81; tok2: 0.01 vs (0.7-1)^2 = 0.09 -> 0.09 (clipped)
    assert loss.item() == pytest.approx(0.5 * 0.94 / 3, abs=1e-6)
    assert stats["value_clip_frac"].item() == pytest.approx(1 / 3)
    plain, _ = clipped_value_loss(v, old, ret, torch.ones(1, 3), clip=None)
    assert plain.item() == pytest.approx(0.5 * (0.04 + 0.81 + 0.01) / 3, abs=1e-6)
