"""Implicit Q-learning over an episode's assistant turns (Kostrikov et al., 2021), from logs.

A turn is one decision: its state s is the context up to the turn (every id before its first
sampled token), its action a the turn's sampled ids, its reward 0 until the episode's last
turn, which gets the episode's reward (``algo.iql.reward: per_turn``: each turn its weighted
process scores, the rest of the episode's reward at the last turn: the return is the same).
The heads read the frozen starting policy's last hidden state: V(s) at the last id before the
turn, Q(s, a) at the turn's last sampled id (a causal model's hidden state there has read
exactly s, then a). With the features fixed, both heads fit in full-batch steps:

    L_V = mean |tau - 1(Q - V < 0)| (Q - V)^2         (expectile regression, Q held fixed)
    L_Q = mean (r + gamma (1 - done) V(s') - Q)^2     (TD, V(s') held fixed)

(the paper's target Q network is the current Q without gradient here: on frozen features the
fit is stable without one). The policy then follows advantage-weighted regression: each
turn's tokens weigh ``min(exp(beta (Q - V)), weight_cap)`` in a weighted log-likelihood
(``agentrl.offline.awr``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from agentrl.algos.forward import policy_hidden
from agentrl.algos.value import ValueHead
from agentrl.types import Trajectory


def expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """Mean asymmetric squared error |tau - 1(diff < 0)| diff^2 of ``diff`` (N,) = target -
    prediction: with tau > 0.5, V is pushed toward the upper expectile of Q."""
    weight = torch.where(diff < 0, 1.0 - tau, tau)  # (N,)
    return (weight * diff.pow(2)).mean()


def td_targets(
    rewards: torch.Tensor,  # (N,) per turn
    next_values: torch.Tensor,  # (N,) V(s') of the next turn's state (anything where done)
    dones: torch.Tensor,  # (N,) 1 at an episode's last turn
    gamma: float,
) -> torch.Tensor:  # (N,)
    """Q's regression targets r + gamma (1 - done) V(s')."""
    return rewards + gamma * (1.0 - dones.float()) * next_values


def awr_weights(
    q: torch.Tensor, v: torch.Tensor, beta: float, cap: float, normalize: bool = False
) -> torch.Tensor:
    """Per-turn weights min(exp(beta (Q - V)), cap) (N,), without gradient. ``normalize``:
    the advantages standardized over the N turns first, the weights divided by their mean."""
    adv = (q - v).detach()  # (N,)
    if normalize and len(adv) > 1:
        adv = (adv - adv.mean()) / adv.std().clamp(min=1e-8)
    w = torch.exp(beta * adv).clamp(max=cap)  # (N,)
    return w / w.mean() if normalize else w


def turn_rewards(traj: Trajectory, turns: list[int], mode: str) -> list[float]:
    """Reward of each of the episode's turns (``turns``: their indices, in order)."""
    r = traj.reward
    out = [0.0] * len(turns)
    if mode == "per_turn":
        for k, turn in enumerate(turns):
            scores = r.per_turn[turn] if 0 <= turn < len(r.per_turn) else {}
            out[k] = sum(r.weights.get(name, 0.0) * v for name, v in scores.items())
    elif mode != "final":
        raise ValueError(f"config field 'algo.iql.reward' must be 'final' or 'per_turn', "
                         f"got {mode!r}")  # fmt: skip
    if out:
        out[-1] += r.total - sum(out)
    return out


@dataclass
class Turn:
    """One logged decision: its row (a context of an episode), its sampled span, its reward."""

    row: int  # index into the contexts the features were computed on
    turn: int  # the assistant-turn index
    start: int  # first sampled id
    end: int  # one past the last sampled id
    reward: float
    done: bool  # the episode's last turn


def episode_turns(rows: list[Trajectory], owner: list[int], trajs: list[Trajectory],
                  mode: str) -> list[Turn]:  # fmt: skip
    """Every turn of every row (``agentrl.algos.segments.segment_rows``), episode by episode
    in order; rewards per ``mode`` (``turn_rewards``)."""
    spans: dict[int, list[tuple[int, int, int, int]]] = {}
    for r, row in enumerate(rows):
        mask, turn_of = row.loss_mask, row.turn_of_token
        for i, m in enumerate(mask):
            if m and (i == 0 or not mask[i - 1]):
                end = i
                while end < len(mask) and mask[end]:
                    end += 1
                spans.setdefault(owner[r], []).append((turn_of[i], r, i, end))
    out = []
    for n, items in sorted(spans.items()):
        rewards = turn_rewards(trajs[n], [t for t, *_ in items], mode)
        for k, (turn, r, start, end) in enumerate(items):
            out.append(Turn(r, turn, start, end, rewards[k], k == len(items) - 1))
    return out


@torch.no_grad()
def turn_features(model: Any, rows: list[Trajectory], turns: list[Turn], pad_id: int,
                  chunk: int = 8) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(state, action) features (N, H): ``model``'s last hidden state at each turn's last id
    before it and at its last sampled id."""
    device = next(model.parameters()).device
    states, actions = [None] * len(turns), [None] * len(turns)
    by_row: dict[int, list[int]] = {}
    for k, t in enumerate(turns):
        by_row.setdefault(t.row, []).append(k)
    order = sorted(by_row)
    for s in range(0, len(order), chunk):
        part = order[s : s + chunk]
        width = max(len(rows[r].token_ids) for r in part)
        ids = torch.full((len(part), width), pad_id, dtype=torch.long)  # (B, T)
        attention = torch.zeros_like(ids)  # (B, T)
        for b, r in enumerate(part):
            ids[b, : len(rows[r].token_ids)] = torch.tensor(rows[r].token_ids)
            attention[b, : len(rows[r].token_ids)] = 1
        hidden = policy_hidden(model, ids.to(device), attention.to(device)).float().cpu()
        for b, r in enumerate(part):
            for k in by_row[r]:
                states[k] = hidden[b, max(turns[k].start - 1, 0)]  # (H,)
                actions[k] = hidden[b, turns[k].end - 1]  # (H,)
    return torch.stack(states), torch.stack(actions)  # (N, H) each


class TurnHead(nn.Module):
    """A small MLP on a hidden state -> a scalar (zero at the start: ``ValueHead``)."""

    def __init__(self, hidden_size: int, width: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(hidden_size, width), nn.Tanh())
        self.out = ValueHead(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, H) -> (N,)
        return self.out(self.body(x))


def fit_iql(
    states: torch.Tensor,  # (N, H) V's input per turn
    actions: torch.Tensor,  # (N, H) Q's input per turn
    turns: list[Turn],
    *,
    tau: float,
    gamma: float,
    steps: int,
    lr: float,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Fit Q and V on the turns; (Q (N,), V (N,), stats) at the end."""
    torch.manual_seed(seed)
    both = torch.cat([states, actions])  # (2N, H): one scale for both inputs
    mean, std = both.mean(0), both.std(0).clamp(min=1e-6)
    s, a = (states - mean) / std, (actions - mean) / std  # (N, H)
    rewards = torch.tensor([t.reward for t in turns])  # (N,)
    dones = torch.tensor([t.done for t in turns])  # (N,)
    nxt = torch.arange(1, len(turns) + 1).clamp(max=len(turns) - 1)  # (N,) next turn's row
    q_head, v_head = TurnHead(s.shape[1]), TurnHead(s.shape[1])
    opt = torch.optim.Adam([*q_head.parameters(), *v_head.parameters()], lr=lr)
    for _ in range(steps):
        q, v = q_head(a), v_head(s)  # (N,) each
        target = td_targets(rewards, v.detach()[nxt], dones, gamma)  # (N,)
        loss_q = (q - target).pow(2).mean()
        loss_v = expectile_loss(q.detach() - v, tau)
        opt.zero_grad()
        (loss_q + loss_v).backward()
        opt.step()
    with torch.no_grad():
        q, v = q_head(a), v_head(s)
    stats = {"iql/loss_q": float(loss_q.detach()), "iql/loss_v": float(loss_v.detach()),
             "iql/q_mean": float(q.mean()), "iql/v_mean": float(v.mean()),
             "iql/advantage_std": float((q - v).std()) if len(turns) > 1 else 0.0}  # fmt: skip
    return q, v, stats
