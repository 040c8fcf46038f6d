"""KL to the reference policy: per-token estimators and coefficient controllers.

Estimators of KL(pi || ref) from samples of pi (Schulman, "Approximating KL divergence"),
with ``r = log ref(x) - log pi(x)``:

- ``k1 = -r``: unbiased, high variance, can be negative per token;
- ``k2 = r**2 / 2``: biased, low variance, never negative;
- ``k3 = exp(r) - 1 - r``: unbiased, low variance, never negative.

Controllers give the coefficient beta for each step: ``fixed``; ``adaptive`` (Ziegler et al.
2019: beta grows when the measured KL is above target, shrinks when below, at a rate set by
the horizon); ``decay`` (beta times (1 - rate) every ``every`` steps, seed 000's guide: -5% per
1000 steps). Controllers carry state through checkpoints (``state_dict``).
"""

from __future__ import annotations

from typing import Any

import torch

ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(
    logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3", max_abs: float | None = None
) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate, (B, T) from (B, T) log-probs of the sampled tokens.

    ``max_abs`` clamps each token's estimate to [-max_abs, max_abs] (no gradient past it): k3
    grows as exp(ref - logp), so one token the policy has made rare can outweigh the rest.
    """
    r = ref_logp - logp  # (B, T)
    if kind == "k1":
        est = -r
    elif kind == "k2":
        est = 0.5 * r**2
    elif kind == "k3":
        est = torch.exp(r) - r - 1.0
    else:
        raise ValueError(
            f"config field 'algo.kl.estimator' must be one of {ESTIMATORS}, got {kind!r}"
        )
    return est if max_abs is None else est.clamp(-max_abs, max_abs)


def decayed_coef(init: float, step: int, rate: float = 0.05, every: int = 1000) -> float:
    """Step decay: ``init * (1 - rate) ** (step // every)``."""
    return init * (1.0 - rate) ** (step // every)


def adaptive_coef(coef: float, kl: float, target: float, n_steps: int, horizon: int) -> float:
    """One adaptive update: ``coef * (1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon)``.

    ``n_steps`` is the number of samples (episodes) the KL was measured on, as in Ziegler et al.
    """
    error = min(max(kl / target - 1.0, -0.2), 0.2)
    return coef * (1.0 + error * n_steps / horizon)


class KLController:
    """The KL coefficient of each RL step: ``fixed``, ``adaptive`` or ``decay``."""

    KINDS = ("fixed", "adaptive", "decay")

    def __init__(
        self,
        kind: str,
        init: float,
        *,
        target: float = 0.1,
        horizon: int = 10_000,
        decay_rate: float = 0.05,
        decay_every: int = 1000,
    ) -> None:
        if kind not in self.KINDS:
            raise ValueError(
                f"config field 'algo.kl.control' must be one of {self.KINDS}, got {kind!r}"
            )
        self.kind, self.init, self.coef = kind, init, init
        self.target, self.horizon = target, horizon
        self.decay_rate, self.decay_every = decay_rate, decay_every

    def value(self, step: int) -> float:
        """The coefficient to use at ``step``."""
        if self.kind == "decay":
            return decayed_coef(self.init, step, self.decay_rate, self.decay_every)
        return self.coef

    def update(self, kl: float, n_steps: int) -> None:
        """Feed the KL measured on this step's ``n_steps`` episodes (adaptive only)."""
        if self.kind == "adaptive" and self.init > 0:
            self.coef = adaptive_coef(self.coef, kl, self.target, n_steps, self.horizon)

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "coef": self.coef}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["kind"] != self.kind:
            raise ValueError(f"checkpoint KL controller is {state['kind']!r}, config {self.kind!r}")
        self.coef = float(state["coef"])
