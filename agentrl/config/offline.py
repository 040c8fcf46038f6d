"""The ``algo.iql`` section: implicit Q-learning over a run's logged turns (``agentrl offline
--algo iql``, ``agentrl.offline.iql``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentrl.config.base import Section


class IQLConfig(Section):
    """IQL (Kostrikov et al., 2021) from logged episodes: V by expectile regression, Q by TD,
    then advantage-weighted regression of the policy on the logged turns."""

    tau: float = Field(
        0.7, gt=0, lt=1, description="Expectile of V's regression on Q (0.5 = the mean)."
    )
    beta: float = Field(
        3.0, gt=0, description="AWR inverse temperature: a turn weighs exp(beta * (Q - V))."
    )
    weight_cap: float = Field(
        100.0, gt=0, description="Upper bound of a turn's AWR weight (the paper's 100)."
    )
    normalize: bool = Field(
        False,
        description="Standardize the advantages over the logged turns before the exp (beta "
        "then counts standard deviations) and divide the weights by their mean (the step size "
        "of plain imitation).",
    )
    gamma: float = Field(0.99, gt=0, le=1, description="Discount per assistant turn.")
    reward: Literal["final", "per_turn"] = Field(
        "final",
        description="'final': the episode's reward at its last turn; 'per_turn': each turn's "
        "weighted process scores, the rest of the episode's reward at the last turn.",
    )
    head_steps: int = Field(
        300, ge=1, description="Full-batch Adam steps fitting the Q and V heads."
    )
    head_lr: float = Field(1e-2, gt=0, description="Learning rate of the Q and V heads.")
