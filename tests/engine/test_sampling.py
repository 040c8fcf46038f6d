"""The engine's token choice: samples follow softmax(logits / T) within the top-p nucleus,
each row from its own stream, with the log-prob of the temperature-scaled distribution."""

from __future__ import annotations

import torch

from agentrl.engine.sampling import choose_tokens, inverse_cdf_sample


def _gens(n: int, seed: int = 0) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed + i) for i in range(n)]


def test_samples_follow_the_tempered_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -30.0]])  # (1, V)
    temperature = 0.7
    gen = torch.Generator().manual_seed(3)
    counts = torch.zeros(5)
    n = 20_000
    for _ in range(n // 100):
        ids, _ = choose_tokens(logits.expand(100, -1), [gen] * 100, temperature=temperature)
        counts += torch.bincount(ids, minlength=5).float()
    expected = torch.softmax(logits[0] / temperature, -1)
    freq = counts / n
    assert torch.allclose(freq, expected, atol=0.012), (freq, expected)
    assert counts[4] == 0  # probability ~1e-19


def test_top_p_never_leaves_the_nucleus_and_logprob_is_before_the_cut():
    logits = torch.tensor([[3.0, 2.5, 0.0, -0.5, -1.0]])  # p ~ [.58, .35, .03, .02, .01]
    ids, lps = choose_tokens(logits.expand(4000, -1), _gens(4000), temperature=1.0, top_p=0.9)
    assert set(ids.tolist()) == {0, 1}  # the first two already hold 0.93 of the mass
    full = torch.log_softmax(logits[0], -1)
    assert torch.allclose(lps, full[ids])
    share = (ids == 0).float().mean().item()
    assert abs(share - 0.58 / 0.93) < 0.03


def test_each_row_samples_from_its_own_stream():
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    alone = [choose_tokens(logits[i : i + 1], _gens(1, 10 + i))[0].item() for i in range(6)]
    batch, _ = choose_tokens(logits, _gens(6, 10))
    assert batch.tolist() == alone
    again, _ = choose_tokens(logits, _gens(6, 10))
    assert torch.equal(batch, again)


def test_greedy_takes_the_argmax_with_untempered_logprob():
    logits = torch.tensor([[0.1, 2.0, -1.0], [5.0, 4.0, 0.0]])
    ids, lps = choose_tokens(logits, None, temperature=0.5)
    assert ids.tolist() == [1, 0]
    assert torch.allclose(lps, torch.log_softmax(logits, -1)[[0, 1], ids])


def test_inverse_cdf_skips_empty_tokens_at_the_edges():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]] * 3)
    ids = inverse_cdf_sample(probs, torch.tensor([0.0, 0.4999, 0.9999999]))
    assert ids.tolist() == [1, 1, 3]


def test_two_level_inverse_cdf_matches_the_distribution_across_blocks():
    weights = torch.tensor([[0.5, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.25, 3.0, 1.25]])  # V=10
    n = 10_000
    u = (torch.arange(n, dtype=torch.float32) + 0.5) / n  # an even grid over [0, 1)
    ids = inverse_cdf_sample(weights.expand(n, -1), u, block=4)  # 3 blocks, the last padded
    freq = torch.bincount(ids, minlength=10).float() / n
    assert torch.allclose(freq, weights[0] / weights.sum(), atol=2e-4), freq
    assert bool((ids.diff() >= 0).all())  # the CDF is inverted in token order
