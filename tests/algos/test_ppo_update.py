"""PPO update mechanics on the tiny model: micro-batching gives the whole minibatch's gradient,
a separate critic trains apart from the policy, target-KL early stop, value head shapes."""

import copy
import random

import pytest
import torch

from agentrl.algos.batch import Batch, Signals
from agentrl.algos.ppo import ppo_update, rollout_values
from agentrl.algos.value import make_critic


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _batch(seed: int = 0) -> tuple[Batch, Signals]:
    g = torch.Generator().manual_seed(seed)
    lengths = [14, 9, 12, 6]
    ids = torch.randint(0, 2000, (4, 14), generator=g)
    attention = torch.zeros(4, 14, dtype=torch.long)
    mask = torch.zeros(4, 13)
    for i, n in enumerate(lengths):
        attention[i, :n] = 1
        mask[i, 3 : n - 1] = 1.0
    batch = Batch(ids, attention, ids[:, 1:], mask, old_logp=torch.full((4, 13), -7.0))
    signals = Signals(
        advantages=torch.randn(4, 13, generator=g) * mask,
        old_values=torch.zeros(4, 13),
        returns=torch.randn(4, 13, generator=g) * mask,
        value_mask=mask.clone(),
    )
    return batch, signals


def _update(model, critic, batch, **kw):
    params = list(model.parameters()) + list(critic.parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    args = dict(clip_eps=0.2, value_clip=0.2, vf_coef=0.5, kl_coef=0.0, kl_kind="k3",
                kl_in_loss=False, entropy_coef=0.01, loss_agg="token_mean", epochs=1,
                minibatches=1, max_grad_norm=1e9, temperature=1.0,
                rng=random.Random(0))  # fmt: skip
    return ppo_update(model, critic, opt, *batch, **{**args, **kw})


def test_micro_batches_give_the_same_update_as_one_batch(tiny_policy):
    model, _ = tiny_policy
    results = []
    for kw in ({}, {"grad_accum": 2}, {"token_budget": 20}):
        m = copy.deepcopy(model)
        critic = make_critic(m, "head")
        n = critic.head.proj.weight.numel()
        critic.head.proj.weight.data = torch.linspace(-0.1, 0.1, n)[None]  # a non-zero head
        stats = _update(m, critic, _batch(), **kw)
        assert stats["updates"] == 1.0
        results.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    assert torch.allclose(results[0], results[1], atol=1e-6)
    assert torch.allclose(results[0], results[2], atol=1e-6)


def test_separate_critic_trains_its_own_trunk_only_through_the_value_loss(tiny_policy):
    model, _ = tiny_policy
    m = copy.deepcopy(model)
    critic = make_critic(m, "separate")
    batch = _batch()
    values = rollout_values(m, critic, batch[0])
    assert values.shape == (4, 14) and torch.count_nonzero(values) == 0  # zero-initialized head
    trunk_before = [p.detach().clone() for p in critic.backbone.parameters()]
    policy_before = [p.detach().clone() for p in m.parameters()]
    _update(m, critic, batch, epochs=2)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(trunk_before, critic.backbone.parameters(), strict=True)
    )
    assert any(not torch.equal(a, b) for a, b in zip(policy_before, m.parameters(), strict=True))
    # the policy's own trunk is not the critic's: they are different tensors
    assert all(
        a.data_ptr() != b.data_ptr()
        for a, b in zip(m.get_decoder().parameters(), critic.backbone.parameters(), strict=True)
    )


def test_target_kl_stops_the_epochs_early(tiny_policy):
    model, _ = tiny_policy
    m = copy.deepcopy(model)
    critic = make_critic(m, "head")
    # old_logp = -7 while the model's log-probs are far from it: approx KL is large at once
    stats = _update(m, critic, _batch(), epochs=4, minibatches=2, target_kl=1e-3)
    assert stats["early_stop"] == 1.0 and stats["updates"] == 1.0
