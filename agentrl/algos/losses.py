"""Policy-gradient losses and KL estimators: pure functions with shape comments."""

from __future__ import annotations

import torch

from agentrl.algos.kl import kl_estimate


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi || ref) per token: exp(r) - r - 1 with r = ref - logp. (B, T)."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1.0


def masked_mean(x: torch.Tensor, mask: torch.Tensor, agg: str = "token_mean") -> torch.Tensor:
    """Mean of x (B, T) over mask (B, T).

    ``token_mean``: every policy token in the batch weighs the same.
    ``seq_mean``: mean per sequence first, then over sequences that have any token.
    """
    mask = mask.to(x.dtype)
    if agg == "token_mean":
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    if agg == "seq_mean":
        per_seq = (x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # (B,)
        has_tokens = (mask.sum(-1) > 0).to(x.dtype)  # (B,)
        return (per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    raise ValueError(f"loss aggregation must be 'token_mean' or 'seq_mean', got {agg!r}")


def weighted(x: torch.Tensor, is_weight: torch.Tensor | None) -> torch.Tensor:  # (B, T)
    """``x * is_weight`` (no gradient through the weight), or ``x`` when there is none."""
    return x if is_weight is None else x * is_weight.detach()


def clipped_policy_loss(
    logp: torch.Tensor,  # (B, T) current policy log-probs of the taken tokens
    old_logp: torch.Tensor,  # (B, T) rollout-time log-probs
    advantages: torch.Tensor,  # (B,) per-episode or (B, T) per-token advantages
    mask: torch.Tensor,  # (B, T) 1 = policy token that counts in the loss
    clip_eps: float = 0.2,
    agg: str = "token_mean",
    is_weight: torch.Tensor | None = None,  # (B, T) truncated importance weights, or None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO/GRPO clipped surrogate: -w min(r A, clip(r, 1-e, 1+e) A), aggregated over mask.

    ``is_weight`` (w, no gradient): a stale sample's correction from the policy that played it
    to the one the ratio ``r`` starts from (``agentrl.algos.offpolicy``); None: w = 1.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(logp)  # (B, T)
    ratio = torch.exp(logp - old_logp)  # (B, T)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    surrogate = weighted(-torch.minimum(unclipped, clipped), is_weight)  # (B, T)
    loss = masked_mean(surrogate, mask, agg)
    with torch.no_grad():
        clip_frac = masked_mean((unclipped != clipped).to(logp.dtype), mask, "token_mean")
        approx_kl_old = masked_mean(0.5 * (logp - old_logp) ** 2, mask, "token_mean")
    return loss, {"clip_frac": clip_frac, "approx_kl_old": approx_kl_old}


def grpo_loss(
    logp: torch.Tensor,  # (B, T)
    old_logp: torch.Tensor,  # (B, T)
    ref_logp: torch.Tensor | None,  # (B, T) frozen reference, or None when kl_coef = 0
    advantages: torch.Tensor,  # (B,)
    mask: torch.Tensor,  # (B, T)
    clip_eps: float = 0.2,
    kl_coef: float = 0.0,
    agg: str = "token_mean",
    kl_kind: str = "k3",
    is_weight: torch.Tensor | None = None,  # (B, T) or None
    kl_max: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO objective: clipped surrogate + kl_coef * KL to the reference, over policy tokens.

    ``kl_kind`` picks the per-token estimator (``agentrl.algos.kl``: k1, k2, k3);
    ``is_weight`` weighs each token's surrogate and its KL estimate (stale samples): the
    estimators assume tokens sampled from the policy, and a token the policy has since made
    rare gives k3 = exp(ref - logp) - ... in the thousands; weighted, it counts as rarely as
    the policy now samples it. ``kl_max`` clamps each token's estimate (``kl_estimate``).
    """
    pg_loss, stats = clipped_policy_loss(logp, old_logp, advantages, mask, clip_eps, agg, is_weight)
    if ref_logp is not None and kl_coef > 0:
        kl_tok = kl_estimate(logp, ref_logp, kl_kind, kl_max)  # (B, T)
        kl = masked_mean(weighted(kl_tok, is_weight), mask, agg)
    else:
        kl = torch.zeros((), dtype=logp.dtype)
    loss = pg_loss + kl_coef * kl
    stats = {**stats, "policy": pg_loss.detach(), "kl": kl.detach()}
    return loss, stats


def clipped_value_loss(
    values: torch.Tensor,  # (B, T) current critic values
    old_values: torch.Tensor,  # (B, T) critic values at rollout time
    returns: torch.Tensor,  # (B, T) GAE value targets
    mask: torch.Tensor,  # (B, T) 1 where the value loss counts
    clip: float | None = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO value loss: ``0.5 * max((v - R)^2, (v_clip - R)^2)``, token mean over ``mask``.

    ``v_clip = old + clamp(v - old, -clip, clip)`` keeps the critic near its rollout-time
    values; ``clip=None`` gives the plain ``0.5 * (v - R)^2``.
    """
    loss_plain = (values - returns) ** 2  # (B, T)
    if clip is None:
        per_token = loss_plain
        clip_frac = torch.zeros((), dtype=values.dtype)
    else:
        v_clip = old_values + torch.clamp(values - old_values, -clip, clip)  # (B, T)
        loss_clipped = (v_clip - returns) ** 2  # (B, T)
        per_token = torch.maximum(loss_plain, loss_clipped)
        with torch.no_grad():
            clip_frac = masked_mean((loss_clipped > loss_plain).to(values.dtype), mask)
    return 0.5 * masked_mean(per_token, mask), {"value_clip_frac": clip_frac}
