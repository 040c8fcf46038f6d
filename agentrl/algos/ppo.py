"""PPO with a critic: GAE targets at turn or token level, clipped policy and value losses.

Flow for one RL step: ``build_batch`` and ``reference_logprobs`` (shared with GRPO) ->
``rollout_values`` (critic values, no grad) -> ``ppo_targets`` (GAE advantages and value
targets, a pure function) -> ``ppo_update`` (``run_updates`` with the PPO micro-batch loss and
the target-KL early stop).

Rewards: an episode's (normalized) reward arrives at the end of its last assistant turn;
with ``kl_mode='reward'`` each policy token also carries ``-beta * k1`` (a turn-level step
sums its tokens'). Truncated episodes bootstrap from V(final state) when asked.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from agentrl.algos.batch import Batch, Signals
from agentrl.algos.forward import forward_logprobs, policy_hidden
from agentrl.algos.gae import gae, whiten
from agentrl.algos.kl import kl_estimate
from agentrl.algos.losses import clipped_policy_loss, clipped_value_loss, masked_mean, weighted
from agentrl.algos.moe import add_aux_loss, capturing, router_capture
from agentrl.algos.update import MicroLoss, run_updates
from agentrl.algos.value import Critic
from agentrl.types import Trajectory


def turn_ids(trajs: list[Trajectory], width: int) -> torch.Tensor:
    """(B, T-1) assistant-turn index of each target token (-1: not a policy token, padding)."""
    out = torch.full((len(trajs), width - 1), -1, dtype=torch.long)
    for i, t in enumerate(trajs):
        k = len(t.token_ids)
        out[i, : k - 1] = torch.tensor(t.turn_of_token[1:], dtype=torch.long)
    return out


def _steps(turns: torch.Tensor, level: str) -> tuple[list[int], list[list[int]]]:
    """Per row: the target index of each step, and the targets each step covers.

    ``turns`` (T-1,) turn index per target. Turn level: a step is a turn, placed at its first
    token. Token level: a step is one policy token.
    """
    pos = (turns >= 0).nonzero().flatten().tolist()
    if level == "token":
        return pos, [[j] for j in pos]
    groups: dict[int, list[int]] = {}
    for j in pos:
        groups.setdefault(int(turns[j]), []).append(j)
    covers = [groups[k] for k in sorted(groups)]
    return [c[0] for c in covers], covers


def ppo_targets(
    values: torch.Tensor,  # (B, T) V(state after tokens 0..t) at rollout time
    turns: torch.Tensor,  # (B, T-1) turn index per target, -1 if not a policy token
    lengths: torch.Tensor,  # (B,) real tokens per row
    rewards: torch.Tensor,  # (B,) episode reward, given at the end of the last turn
    valid: torch.Tensor,  # (B,) bool: False rows get no advantage and no value loss
    bootstrap: torch.Tensor,  # (B,) bool: truncated episode, bootstrap from V(final state)
    kl_penalty: torch.Tensor | None,  # (B, T-1) beta * KL per token, subtracted from reward
    gamma: float,
    lam: float,
    level: str = "turn",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GAE advantages (B, T-1), value targets (B, T-1) and value-loss mask (B, T-1).

    Turn level: one step per assistant turn, valued at its first token; every token of the
    turn gets the turn's advantage; the value loss counts at turn starts. Token level: one
    step per policy token, discounted by ``gamma`` only across turn boundaries (not between
    tokens of one turn); the value loss counts at every policy token.
    """
    if level not in ("turn", "token"):
        raise ValueError(
            f"config field 'algo.ppo.gae_level' must be 'turn' or 'token', got {level!r}"
        )
    n, width = turns.shape
    per_row = [_steps(turns[i], level) for i in range(n)]
    s = max([len(p[0]) for p in per_row] + [1])
    r = torch.zeros(n, s)  # (B, S)
    v = torch.zeros(n, s)  # (B, S)
    m = torch.zeros(n, s)  # (B, S)
    disc = torch.full((n, s), gamma)  # (B, S)
    boot = torch.zeros(n)  # (B,)
    for i, (pos, covers) in enumerate(per_row):
        if not valid[i] or not pos:
            continue
        k = len(pos)
        m[i, :k] = 1.0
        v[i, :k] = values[i, pos].float()
        if kl_penalty is not None:
            r[i, :k] = torch.stack([-kl_penalty[i, c].sum() for c in covers]).float()
        r[i, k - 1] += float(rewards[i])
        if level == "token":  # no discount between tokens of the same turn
            same = (turns[i, pos[1:]] == turns[i, pos[:-1]]).float()  # (k-1,)
            disc[i, : k - 1] = gamma + same * (1.0 - gamma)
        if bootstrap[i]:
            boot[i] = float(values[i, int(lengths[i]) - 1])
    adv_s, ret_s = gae(r, v, m, boot, disc, lam)  # (B, S) each
    adv = torch.zeros(n, width)  # (B, T-1)
    ret = torch.zeros(n, width)  # (B, T-1)
    vmask = torch.zeros(n, width)  # (B, T-1)
    for i, (pos, covers) in enumerate(per_row):
        if not valid[i]:
            continue
        for k, (p, c) in enumerate(zip(pos, covers, strict=True)):
            adv[i, c] = adv_s[i, k]
            ret[i, p] = ret_s[i, k]
            vmask[i, p] = 1.0
    return adv, ret, vmask


@torch.no_grad()
def rollout_values(
    model: Any, critic: Critic, batch: Batch, chunk: int = 16
) -> torch.Tensor:  # (B, T)
    """Critic values at every position of the batch, in chunks, without gradients."""
    device = next(model.parameters()).device
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)  # (B, T)
    was_training = model.training
    model.eval()
    critic.eval()
    for s in range(0, batch.input_ids.shape[0], chunk):
        rows = list(range(s, min(s + chunk, batch.input_ids.shape[0])))
        sub = batch.select(rows).to(device)
        hidden = None if critic.separate else policy_hidden(model, sub.input_ids, sub.attention)
        v = critic(sub.input_ids, sub.attention, hidden).float().cpu()  # (b, t)
        out[rows, : v.shape[1]] = v
    model.train(was_training)
    return out


def ppo_signals(
    model: Any,
    critic: Critic,
    batch: Batch,
    trajs: list[Trajectory],
    rewards: torch.Tensor,  # (N,) episode rewards (normalized)
    valid: torch.Tensor,  # (N,) bool
    bootstrap: torch.Tensor,  # (N,) bool
    *,
    gamma: float,
    lam: float,
    level: str,
    kl_coef: float,
    kl_mode: str,
    whiten_advantages: bool,
    values: torch.Tensor | None = None,  # (B, T) precomputed (a team's central critic)
) -> tuple[Signals, dict[str, float]]:
    """PPO's signals of one batch: old values, GAE advantages, returns, value mask; and the
    ``value/`` metrics. ``batch.ref_logp`` carries the reference when the KL is in the reward.
    """
    if values is None:
        values = rollout_values(model, critic, batch)  # (B, T)
    kl_penalty = None
    if kl_mode == "reward" and batch.ref_logp is not None and kl_coef > 0:
        kl_penalty = kl_coef * kl_estimate(batch.old_logp, batch.ref_logp, "k1") * batch.mask
    turns = turn_ids(trajs, batch.input_ids.shape[1])
    lengths = batch.attention.sum(-1)  # (B,)
    adv, ret, vmask = ppo_targets(
        values, turns, lengths, rewards, valid, bootstrap, kl_penalty, gamma, lam, level
    )
    if whiten_advantages:
        adv = whiten(adv, batch.mask)
    old_values = values[:, :-1]  # (B, T-1)
    stats = {"value/mean": float(masked_mean(old_values, vmask))}
    if vmask.sum() > 1:
        resid = torch.var((ret - old_values)[vmask > 0], unbiased=False)
        stats["value/explained_var"] = float(1.0 - resid / torch.var(ret[vmask > 0]).clamp(1e-8))
    return Signals(adv, old_values, ret, vmask), stats


def ppo_update(
    model: Any,
    critic: Critic,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    signals: Signals,
    *,
    clip_eps: float,
    value_clip: float | None,
    vf_coef: float,
    kl_coef: float,
    kl_kind: str,
    kl_in_loss: bool,
    entropy_coef: float,
    loss_agg: str,
    epochs: int,
    minibatches: int,
    max_grad_norm: float,
    temperature: float,
    rng: random.Random,
    target_kl: float | None = None,
    grad_accum: int = 1,
    token_budget: int = 0,
    amp_dtype: torch.dtype | None = None,
    moe_aux_coef: float = 0.0,
    kl_max: float | None = None,
) -> dict[str, Any]:
    """Epochs x minibatches PPO updates of policy and critic on one prepared batch.

    Loss = clipped policy loss + vf_coef * clipped value loss - entropy_coef * entropy
    (+ moe_aux_coef * router load balancing for a Mixture-of-Experts policy, ``algos.moe``)
    (+ kl_coef * KL when ``kl_in_loss``). Stops early when the mean approximate KL to the
    rollout policy exceeds ``1.5 * target_kl``. ``stats["stepped"]`` lists each update.
    """
    loss = ppo_micro_loss(
        model, critic, clip_eps=clip_eps, value_clip=value_clip, vf_coef=vf_coef,
        kl_coef=kl_coef if kl_in_loss else 0.0, kl_kind=kl_kind, entropy_coef=entropy_coef,
        loss_agg=loss_agg, temperature=temperature, moe_aux_coef=moe_aux_coef, kl_max=kl_max,
    )  # fmt: skip

    def stop(sums: dict[str, float]) -> bool:  # PPO always reports policy/early_stop
        return target_kl is not None and sums.get("approx_kl_old", 0.0) > 1.5 * target_kl

    critic.train()
    return run_updates(
        model, optimizer, batch, signals, loss, epochs=epochs, minibatches=minibatches,
        max_grad_norm=max_grad_norm, rng=rng, loss_agg=loss_agg, grad_accum=grad_accum,
        token_budget=token_budget, amp_dtype=amp_dtype, stop_early=stop,
    )  # fmt: skip


def ppo_micro_loss(
    model, critic: Critic, *, clip_eps, value_clip, vf_coef, kl_coef, kl_kind, entropy_coef,
    loss_agg, temperature, moe_aux_coef=0.0, kl_max=None,
) -> MicroLoss:  # fmt: skip
    """The PPO loss of one micro-batch (policy and value parts weighted by their shares)."""
    routers = router_capture(model)  # None for a dense model

    def micro_loss(mb: Batch, sig: Signals, w_pol: float, w_val: float):
        with capturing(routers):
            logp, ent, hidden = forward_logprobs(
                model, mb, temperature, True, entropy_coef > 0, with_hidden=True
            )  # (b, t-1), (b, t-1), (b, t, H)
        pg, pg_stats = clipped_policy_loss(
            logp, mb.old_logp, sig.advantages, mb.mask, clip_eps, loss_agg, mb.is_weight
        )
        vf, vf_stats = torch.zeros((), dtype=logp.dtype), {"value_clip_frac": 0.0}
        if vf_coef > 0:  # 0: the critic trains elsewhere (a team's central critic)
            if critic.separate:
                hidden = None  # the critic reads its own trunk
            values = critic(mb.input_ids, mb.attention, hidden)[:, :-1].float()  # (b, t-1)
            vf, vf_stats = clipped_value_loss(
                values, sig.old_values, sig.returns, sig.value_mask, value_clip
            )
        entropy = masked_mean(ent, mb.mask, loss_agg)
        kl = torch.zeros((), dtype=logp.dtype)
        if kl_coef > 0 and mb.ref_logp is not None:
            kl_tok = kl_estimate(logp, mb.ref_logp, kl_kind, kl_max)  # (b, t-1)
            kl_tok = weighted(kl_tok, mb.is_weight)
            kl = masked_mean(kl_tok, mb.mask, loss_agg)
        policy_part = pg - entropy_coef * entropy + kl_coef * kl
        policy_part, moe_stats = add_aux_loss(routers, mb, policy_part, moe_aux_coef)
        loss = w_pol * policy_part + w_val * vf_coef * vf
        stats = {
            "policy": w_pol * float(pg.detach()),
            "value": w_val * float(vf.detach()),
            "kl": w_pol * float(kl.detach()),
            "entropy": w_pol * float(entropy.detach()),
            "clip_frac": w_pol * float(pg_stats["clip_frac"]),
            "approx_kl_old": w_pol * float(pg_stats["approx_kl_old"]),
            "value_clip_frac": w_val * float(vf_stats["value_clip_frac"]),
            "total": float(loss.detach()),
        } | {k: w_pol * v for k, v in moe_stats.items()}
        return loss, stats

    return micro_loss
