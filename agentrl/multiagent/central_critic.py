"""A centralized critic for PPO on a team env (``algo.ppo.critic: central``).

Centralized training, decentralized execution: each agent still acts on its own context, but
the value of agent k's turn j is read from the **joint view** at the moment that turn began:
every other agent's tokens so far followed by agent k's own (``info["views"][j]`` holds each
agent's context length then, recorded by the team rollout). The critic is a separate trunk
with a value head (``make_critic(..., "central")``), trained here on those joint views with
PPO's clipped value loss; the policy update runs with its value part off.

Values land in the (N, T) layout of ``ppo_targets`` (turn-level GAE): agent k's turn j at
target index ``t - 1`` where ``t`` is the turn's first sampled token, and the final joint view
(every agent's whole context) at ``len(ids) - 1`` for bootstrapping a truncated episode.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from agentrl.algos.losses import clipped_value_loss
from agentrl.algos.update import guarded_step
from agentrl.algos.value import Critic
from agentrl.types import Trajectory


@dataclass(frozen=True)
class JointView:
    """One critic input: ``ids`` (others' tokens, then the agent's own), valued at its last
    token and placed at ``values[row, pos]``."""

    row: int
    pos: int
    ids: list[int]


def has_views(trajs: list[Trajectory]) -> bool:
    """Whether every trajectory is a team agent's with its recorded joint-view lengths."""
    return bool(trajs) and all("views" in t.info and "team" in t.info for t in trajs)


def joint_views(trajs: list[Trajectory]) -> list[JointView]:
    """Every agent turn's joint view, and every agent's final one (see the module doc)."""
    teams: dict[str, dict[int, int]] = {}  # team id -> agent index -> row
    for i, t in enumerate(trajs):
        teams.setdefault(str(t.info["team"]), {})[int(t.info["agent_index"])] = i
    out = []
    for i, t in enumerate(trajs):
        members = teams[str(t.info["team"])]
        me = int(t.info["agent_index"])
        starts = _turn_starts(t)
        for j, lengths in enumerate(t.info["views"]):
            if j >= len(starts):
                break  # the turn began but sampled nothing: no policy token to value
            out.append(JointView(i, starts[j] - 1, _joint(trajs, members, me, lengths)))
        final = [len(trajs[members[k]].token_ids) if k in members else 0
                 for k in range(max(members) + 1)]  # fmt: skip
        out.append(JointView(i, len(t.token_ids) - 1, _joint(trajs, members, me, final)))
    return out


def _turn_starts(t: Trajectory) -> list[int]:
    """Token index of each sampled turn's first token, in turn order."""
    first: dict[int, int] = {}
    for idx, turn in enumerate(t.turn_of_token):
        if turn >= 0 and turn not in first:
            first[turn] = idx
    return [first[k] for k in sorted(first)]


def _joint(trajs: list[Trajectory], members: dict[int, int], me: int,
           lengths: list[int]) -> list[int]:  # fmt: skip
    ids: list[int] = []
    for k, row in sorted(members.items()):
        if k != me:
            ids += trajs[row].token_ids[: lengths[k]]
    return ids + trajs[members[me]].token_ids[: lengths[me]]


def _pad(views: list[JointView], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(v.ids) for v in views)
    ids = torch.full((len(views), width), pad_id, dtype=torch.long)  # (V, L)
    attention = torch.zeros((len(views), width), dtype=torch.long)  # (V, L)
    for i, v in enumerate(views):
        ids[i, : len(v.ids)] = torch.tensor(v.ids)
        attention[i, : len(v.ids)] = 1
    return ids.to(device), attention.to(device)


def _last_values(critic: Critic, views: list[JointView], pad_id: int) -> torch.Tensor:
    """(V,) the critic's value at each view's last token."""
    device = next(critic.parameters()).device
    ids, attention = _pad(views, pad_id, device)
    values = critic(ids, attention).float()  # (V, L)
    last = attention.sum(-1) - 1  # (V,)
    return values[torch.arange(len(views), device=device), last].cpu()


def central_setup(critic: Critic, trajs: list[Trajectory],
                  batch) -> tuple[list[JointView], torch.Tensor]:  # fmt: skip
    """The step's joint views and their (N, T) rollout-time values (one batch row per
    trajectory; pad ids are masked, so 0 pads)."""
    if not has_views(trajs):
        raise ValueError("algo.ppo.critic: central values a team env's joint views "
                         "(task.env: meeting_duo); these episodes have none: use 'head' or "
                         "'separate'")  # fmt: skip
    views = joint_views(trajs)
    return views, central_values(critic, views, tuple(batch.input_ids.shape), pad_id=0)


@torch.no_grad()
def central_values(critic: Critic, views: list[JointView], shape: tuple[int, int],
                   pad_id: int, chunk: int = 8) -> torch.Tensor:  # fmt: skip
    """(N, T) values: each view's value at ``[row, pos]``, zero elsewhere."""
    out = torch.zeros(shape, dtype=torch.float32)  # (N, T)
    was_training = critic.training
    critic.eval()
    for s in range(0, len(views), chunk):
        part = views[s : s + chunk]
        vals = _last_values(critic, part, pad_id)  # (c,)
        for v, x in zip(part, vals.tolist(), strict=True):
            out[v.row, v.pos] = x
    critic.train(was_training)
    return out


def central_value_update(
    critic: Critic,
    optimizer: torch.optim.Optimizer,
    views: list[JointView],
    old_values: torch.Tensor,  # (N, T-1) rollout-time values (``central_values`` sliced)
    returns: torch.Tensor,  # (N, T-1) GAE value targets
    value_mask: torch.Tensor,  # (N, T-1) 1 where a target counts
    *,
    pad_id: int,
    value_clip: float | None,
    epochs: int,
    batch_views: int,
    max_grad_norm: float,
    rng: random.Random,
) -> dict[str, float]:
    """Epochs of clipped value regression of the critic on the joint views that have a target;
    the optimizer steps the critic's parameters only (the policy's have no gradient), through
    the RL updates' ``guarded_step`` (clipping, a non-finite loss or gradient skipped)."""
    width = value_mask.shape[1]
    targets = [v for v in views if v.pos < width and value_mask[v.row, v.pos] > 0]
    if not targets:
        return {"value": 0.0, "value_clip_frac": 0.0, "central_views": 0.0}
    params = [p for p in critic.parameters() if p.requires_grad]
    critic.train()
    losses, clips = [], []
    for _ in range(epochs):
        order = list(range(len(targets)))
        rng.shuffle(order)
        for s in range(0, len(order), batch_views):
            part = [targets[k] for k in order[s : s + batch_views]]
            rows = torch.tensor([v.row for v in part])
            pos = torch.tensor([v.pos for v in part])
            values = _last_values(critic, part, pad_id)  # (b,) with gradients
            loss, stats = clipped_value_loss(values, old_values[rows, pos], returns[rows, pos],
                                             torch.ones(len(part)), value_clip)  # fmt: skip
            optimizer.zero_grad(set_to_none=True)  # only the critic's gradients step
            loss.backward()
            _, ok = guarded_step(params, optimizer, max_grad_norm, bool(torch.isfinite(loss)))
            if ok:
                losses.append(float(loss.detach()))
                clips.append(float(stats["value_clip_frac"]))
    if not losses:
        return {"value": 0.0, "value_clip_frac": 0.0, "central_views": float(len(targets))}
    return {"value": sum(losses) / len(losses), "value_clip_frac": sum(clips) / len(clips),
            "central_views": float(len(targets))}  # fmt: skip
