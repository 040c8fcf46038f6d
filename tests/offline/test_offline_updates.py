"""The offline updates on the tiny model, on two hand-made episodes of one prompt: DPO raises
the chosen episode over the rejected one, and IQL's AWR weighs the rewarded turn up and raises
its log-likelihood more than the other's (agentrl.offline.dpo, .iql, .awr)."""

from __future__ import annotations

import copy
import random

import torch

from agentrl.algos.batch import build_batch
from agentrl.algos.forward import forward_logprobs
from agentrl.offline.awr import awr_update, token_weights
from agentrl.offline.dpo import log_pairs, train_dpo
from agentrl.offline.iql import awr_weights, episode_turns, fit_iql, turn_features
from agentrl.types import RewardBreakdown, Trajectory


def _episodes(tok) -> list[Trajectory]:
    prompt = tok("<|im_start|>user\nWeather in Oslo?<|im_end|>\n<|im_start|>assistant\n")
    prompt = prompt["input_ids"]
    rng = random.Random(0)
    out = []
    for reward in (1.0, 0.0):
        action = [rng.randrange(300, 1500) for _ in range(6)]
        ids = prompt + action
        mask = [0] * len(prompt) + [1] * len(action)
        r = RewardBreakdown({"completion": reward}, {"completion": 1.0})
        out.append(Trajectory("weather-L1-x", 0, [], ids, mask, [0.0] * len(prompt) + [-5.0] * 6,
                              [-1] * len(prompt) + [0] * 6, r,
                              "success" if reward else "failure"))  # fmt: skip
    return out


def _seq_logp(model, trajs) -> torch.Tensor:  # (N,)
    batch = build_batch(trajs, torch.ones(len(trajs), dtype=torch.bool), pad_id=0)
    with torch.no_grad():
        return (forward_logprobs(model.eval(), batch, 1.0)[0] * batch.mask).sum(-1)


def test_dpo_from_two_logged_episodes(tiny_policy):
    model, tok = tiny_policy
    trajs = _episodes(tok)
    assert log_pairs(trajs) == [(0, 1)]
    policy, ref = copy.deepcopy(model), copy.deepcopy(model).eval()
    start = _seq_logp(policy, trajs)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    stats = train_dpo(policy, ref, opt, trajs, [(0, 1)], pad_id=0, beta=0.5, epochs=4,
                      batch_pairs=1, max_grad_norm=1.0, temperature=1.0, seed=0)  # fmt: skip
    assert stats["updates"] == 4.0 and stats["dpo_pairs"] == 1.0
    end = _seq_logp(policy, trajs)
    assert float((end[0] - end[1]) - (start[0] - start[1])) > 1.0  # nats over 6 tokens


def test_iql_weighs_the_rewarded_turn_up(tiny_policy):
    model, tok = tiny_policy
    trajs = _episodes(tok)
    turns = episode_turns(trajs, [0, 1], trajs, "final")
    states, actions = turn_features(model, trajs, turns, pad_id=0)
    assert torch.equal(states[0], states[1])  # one prompt: one state
    q, v, _ = fit_iql(states, actions, turns, tau=0.7, gamma=0.99, steps=200, lr=0.05)
    w = awr_weights(q, v, beta=3.0, cap=100.0)
    assert w[0] > 2.0 > 0.2 > w[1]  # exp(3 * 0.3) = 2.46 and exp(3 * -0.7) = 0.12
    policy = copy.deepcopy(model)
    start = _seq_logp(policy, trajs)
    batch = build_batch(trajs, torch.ones(2, dtype=torch.bool), pad_id=0)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    awr_update(policy, opt, batch, token_weights(batch, turns, w), epochs=3, batch_rows=2,
               max_grad_norm=1.0, temperature=1.0, seed=0)  # fmt: skip
    gain = _seq_logp(policy, trajs) - start  # (2,) nats over 6 tokens
    # both rise (the ids are imitated through shared weights), the rewarded one by far more
    assert float(gain[0]) > float(gain[1]) + 3.0
