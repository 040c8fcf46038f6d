"""grpo_update on a bigram model whose gradient can be derived by hand: one step follows
-(1/N) sum A_b grad log p over the loss tokens, micro-batching changes nothing, a non-finite
loss is skipped with the weights untouched, and epochs x minibatches updates are made."""

import random
from types import SimpleNamespace

import torch

from agentrl.algos.batch import Batch
from agentrl.algos.grpo import grpo_update

V = 5


class Bigram(torch.nn.Module):
    """logits[b, t] = table[input_ids[b, t]]: next-token scores depend on the current token."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.nn.Parameter(torch.randn(V, V, generator=g))

    def forward(self, input_ids, attention_mask=None, output_hidden_states=False, **_):
        return SimpleNamespace(logits=self.table[input_ids])  # (B, T, V)


def _logp(model: Bigram, ids: torch.Tensor) -> torch.Tensor:  # (B, T-1)
    lp = torch.log_softmax(model.table[ids[:, :-1]], dim=-1)
    return lp.gather(-1, ids[:, 1:, None]).squeeze(-1)


def _batch(model: Bigram, rows: int = 2) -> Batch:
    ids = torch.tensor([[0, 1, 2, 3], [4, 3, 1, 0], [2, 2, 4, 1], [3, 0, 0, 2]])[:rows]
    mask = torch.tensor([[0, 1, 1], [0, 0, 1], [1, 1, 0], [0, 1, 0]], dtype=torch.float32)[:rows]
    with torch.no_grad():
        old = _logp(model, ids)  # ratio 1 at the first update
    return Batch(ids, torch.ones_like(ids), ids[:, 1:], mask, old)


def _update(model, batch, advantages, lr=0.5, **kw):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    args = dict(clip_eps=0.2, kl_coef=0.0, loss_agg="token_mean", epochs=1, minibatches=1,
                max_grad_norm=1e9, temperature=1.0, rng=random.Random(0))  # fmt: skip
    return grpo_update(model, opt, batch, advantages, **{**args, **kw})


def test_one_update_follows_the_hand_derived_policy_gradient():
    model, advantages = Bigram(), torch.tensor([1.0, -1.0])
    batch = _batch(model)
    start = model.table.detach().clone()
    # d/dtheta of -(1/N) sum_{b,t in mask} A_b * log p_bt (the clipped surrogate at ratio 1)
    reference = Bigram()
    objective = -(advantages[:, None] * _logp(reference, batch.input_ids) * batch.mask).sum() / 3
    objective.backward()
    stats = _update(model, batch, advantages)
    assert torch.allclose(model.table.detach(), start - 0.5 * reference.table.grad, atol=1e-6)
    assert stats["updates"] == 1.0 and stats["skipped"] == 0.0 and stats["stepped"] == [True]
    # row 0 has 2 loss tokens with A = +1, row 1 one with A = -1: loss = -(2 - 1) / 3
    assert abs(stats["policy"] - (-1 / 3)) < 1e-6 and stats["clip_frac"] == 0.0
    after = _logp(model, batch.input_ids).detach()
    assert (after[0, 1:] > batch.old_logp[0, 1:]).all()  # A > 0: more likely
    assert after[1, 2] < batch.old_logp[1, 2]  # A < 0: less likely


def test_micro_batches_give_the_same_update_as_one_batch():
    results = []
    for kw in ({}, {"grad_accum": 2}, {"token_budget": 4}):
        model = Bigram()
        _update(model, _batch(model, rows=4), torch.tensor([1.0, -0.5, 0.25, 2.0]), **kw)
        results.append(model.table.detach().clone())
    assert torch.allclose(results[0], results[1], atol=1e-6)
    assert torch.allclose(results[0], results[2], atol=1e-6)


def test_non_finite_loss_is_skipped_and_leaves_the_weights_as_they_were():
    model = Bigram()
    start = model.table.detach().clone()
    stats = _update(model, _batch(model), torch.tensor([float("nan"), 1.0]))
    assert stats["stepped"] == [False] and stats["skipped"] == 1.0 and stats["updates"] == 0.0
    assert torch.equal(model.table.detach(), start) and model.table.grad is None


def test_epochs_times_minibatches_updates_and_invalid_rows_are_left_out():
    model = Bigram()
    batch = _batch(model, rows=4)
    stats = _update(model, batch, torch.ones(4), epochs=2, minibatches=2)
    assert stats["stepped"] == [True] * 4
    # a row without loss tokens (an invalid episode) takes no part: the same update without it
    masked = Batch(
        batch.input_ids,
        batch.attention,
        batch.targets,
        batch.mask * torch.tensor([[1.0], [1.0], [1.0], [0.0]]),
        batch.old_logp,
    )
    three = Bigram()
    three_batch = _batch(three, rows=3)
    a, b = Bigram(), Bigram()
    _update(a, masked, torch.tensor([1.0, -1.0, 0.5, 9.0]))
    _update(b, three_batch, torch.tensor([1.0, -1.0, 0.5]))
    assert torch.allclose(a.table.detach(), b.table.detach(), atol=1e-6)


def test_a_round_off_gradient_does_not_move_adam():
    """Adam divides by the gradient's own scale, so a 1e-8 gradient (round-off when every
    advantage is 0 and the policy equals its reference) would move each weight by about lr;
    guarded_step takes it as an update without stepping, and a real gradient still steps."""
    from agentrl.algos.update import NOISE_GRAD_NORM, guarded_step

    w = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.AdamW([w], lr=1e-2, weight_decay=0.0)
    w.grad = torch.full((4,), 1e-8)
    norm, ok = guarded_step([w], opt, 1.0, True)
    assert ok and norm < NOISE_GRAD_NORM and torch.equal(w.detach(), torch.ones(4))
    assert w.grad is None and not opt.state  # nothing stepped, nothing left over
    free = torch.nn.Parameter(torch.ones(4))  # the same noise through plain AdamW
    free_opt = torch.optim.AdamW([free], lr=1e-2, weight_decay=0.0)
    free.grad = torch.full((4,), 1e-8)
    free_opt.step()
    assert float((free.detach() - 1).abs().max()) > 1e-3  # ~lr/2: noise made a real step
    w.grad = torch.full((4,), 0.5)
    norm, ok = guarded_step([w], opt, 1.0, True)
    assert ok and abs(norm - 1.0) < 1e-6 and float((w.detach() - 1).abs().max()) > 1e-3
