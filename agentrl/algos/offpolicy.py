"""Off-policy correction for stale rollout samples (asynchronous rollout): pure functions.

With ``rollout.max_staleness`` > 0 a step trains on episodes played by weights up to that many
updates old (the behaviour policy mu). agentrl uses the decoupled objective of AReaL (Hilton
et al., 2021, "Batch size-invariance for policy optimization"): the PPO/GRPO ratio is taken
against the *proximal* policy, the trainer's weights when the step starts (its log-probs
recomputed by the trainer), so the clip bounds how far one update moves the policy however
old the sample is; the gap between the proximal policy and mu is corrected per token by a
truncated importance weight ``min(pi_prox / mu, cap)`` (TIS, as verl's rollout correction and
TRL's vLLM importance sampling do), with no gradient. Truncating at ``rollout.is_cap`` bounds
the variance a very unlikely stale token could add; a fresh sample (mu = pi_prox) weighs 1.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from agentrl.algos.batch import Batch


def truncated_is_weights(
    prox_logp: torch.Tensor,  # (B, T) the proximal policy's log-probs of the taken tokens
    behaviour_logp: torch.Tensor,  # (B, T) log-probs of the policy that sampled them
    mask: torch.Tensor,  # (B, T) 1 = policy token
    cap: float,
) -> torch.Tensor:  # (B, T)
    """``min(exp(prox - behaviour), cap)`` on policy tokens, 1 elsewhere."""
    weights = torch.exp(prox_logp - behaviour_logp).clamp(max=cap)  # (B, T)
    return torch.where(mask > 0, weights, torch.ones_like(weights))


def correct_stale_batch(
    batch: Batch, prox_logp: torch.Tensor, cap: float
) -> tuple[Batch, dict[str, float]]:
    """The batch with the proximal log-probs as ``old_logp`` and the truncated importance
    weights as ``is_weight``; metrics: the mean weight, the share of tokens truncated at the
    cap and the mean |behaviour - proximal| log-prob gap, over policy tokens."""
    behaviour = batch.old_logp  # (B, T-1) recorded by the rollout
    weights = truncated_is_weights(prox_logp, behaviour, batch.mask, cap)  # (B, T-1)
    tokens = batch.mask > 0
    if tokens.any():
        raw = torch.exp(prox_logp - behaviour)[tokens]
        stats = {
            "rollout/is_weight_mean": float(weights[tokens].mean()),
            "rollout/is_truncated_frac": float((raw > cap).float().mean()),
            "rollout/logprob_gap": float((behaviour - prox_logp).abs()[tokens].mean()),
        }
    else:
        stats = {"rollout/is_weight_mean": 1.0, "rollout/is_truncated_frac": 0.0,
                 "rollout/logprob_gap": 0.0}  # fmt: skip
    return replace(batch, old_logp=prox_logp, is_weight=weights), stats
