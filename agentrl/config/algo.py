"""The ``algo`` section: shared optimizer fields plus ``grpo``, ``ppo``, ``dpo``, ``kl`` and
``schedule`` sub-sections. Flat keys of earlier releases are refused with the key that replaced
them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from agentrl.config.base import Section, reject_moved_keys
from agentrl.config.offline import IQLConfig


class GRPOConfig(Section):
    """Critic-free estimators (algo.name = 'grpo')."""

    advantage: Literal["grpo", "rloo", "reinforce_pp"] = Field(
        "grpo", description="Advantage estimator: group-centred, leave-one-out or REINFORCE++."
    )
    scale_rewards: bool = Field(
        True, description="Divide group advantages by the group std; False = Dr.GRPO."
    )
    skip_flat_groups: bool = Field(
        False,
        description="Leave out of the update every group whose rewards are all equal (all "
        "solved, all failed: advantage 0 for each member, so no policy gradient, only the KL "
        "term): the update runs on the groups that carry signal. Tree-search siblings "
        "(rollout.search_k) are groups too. Needs algo.kl.mode=loss.",
    )


class DPOConfig(Section):
    """Preference pairs from each group, trained with the DPO loss (algo.name = 'dpo')."""

    beta: float = Field(
        0.1, gt=0, description="DPO's beta: the implicit reward's scale (0.1: the paper's)."
    )
    min_gap: float = Field(
        0.0,
        ge=0,
        description="A group gives a pair only when its best and worst rewards differ by more.",
    )


class PPOConfig(Section):
    """Critic and GAE (algo.name = 'ppo')."""

    gamma: float = Field(0.99, gt=0, le=1, description="Discount (per turn).")
    gamma_start: float | None = Field(
        None, gt=0, le=1, description="Dynamic gamma: from this to gamma (e.g. 0.9 -> 0.99)."
    )
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    gae_level: Literal["turn", "token"] = Field(
        "turn", description="GAE steps: assistant turns or policy tokens."
    )
    critic: Literal["head", "separate", "central"] = Field(
        "head",
        description="Value: a head on the policy's last hidden state, or a copy; 'central' "
        "(a team env): a copy that reads every agent's context (agentrl.multiagent).",
    )
    vf_coef: float = Field(0.5, ge=0, description="Value-loss weight.")
    value_clip: float | None = Field(0.2, gt=0, description="Value clip (None = off).")
    value_lr: float | None = Field(None, gt=0, description="Critic LR (None = the policy's).")
    whiten_advantages: bool = Field(True, description="Whiten advantages over the batch.")
    target_kl: float | None = Field(
        None, gt=0, description="Stop the epochs when approx KL > 1.5 * target_kl."
    )

    @model_validator(mode="after")
    def _central_by_turn(self) -> PPOConfig:
        if self.critic == "central" and self.gae_level != "turn":
            raise ValueError(
                "algo.ppo.critic=central values the team's joint view at each turn's start: "
                "set algo.ppo.gae_level=turn"
            )
        return self


class KLConfig(Section):
    """KL to the reference policy and its coefficient's control."""

    coef: float = Field(
        0.02, ge=0, description="KL-to-reference coefficient; 0 disables the reference model."
    )
    estimator: Literal["k1", "k2", "k3"] = Field(
        "k3", description="Per-token estimator in the loss (k1 is used in the reward)."
    )
    mode: Literal["loss", "reward"] = Field(
        "loss", description="A loss term, or folded into the reward (-coef * k1)."
    )
    max_per_token: float | None = Field(
        None,
        gt=0,
        description="Clamp each token's KL estimate in the loss to this (None = off; verl's "
        "low_var_kl uses 10). k3 grows as exp(log ref - log pi): after Adam's first update, "
        "sampled at temperature 0.3, a real-model run logged a mean of 24,000 per token and "
        "the KL gradient swamped the policy's.",
    )
    control: Literal["fixed", "adaptive", "decay"] = Field(
        "fixed",
        description="fixed; adaptive (coef is the initial value, seeds: 0.01, target 0.1); or "
        "decay (-decay_rate every decay_every steps).",
    )
    target: float = Field(0.1, gt=0, description="Adaptive: target KL per episode.")
    horizon: int = Field(10_000, ge=1, description="Adaptive: horizon in episodes.")
    decay_rate: float = Field(0.05, ge=0, lt=1, description="Decay: fraction removed.")
    decay_every: int = Field(1000, ge=1, description="Decay: steps between decays.")


class ScheduleConfig(Section):
    """Values that move over the RL steps (pure functions of the step: agentrl.algos.schedules)."""

    lr: Literal["constant", "cosine"] = Field(
        "constant", description="LR schedule over the RL steps (after the warm-up)."
    )
    warmup_steps: int = Field(0, ge=0, description="Linear LR warm-up steps.")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Cosine floor as a fraction of lr.")
    entropy_final: float | None = Field(
        None, ge=0, description="algo.entropy_coef at the last step (linear); None = constant."
    )
    temperature_final: float | None = Field(
        None, gt=0, description="rollout.temperature moves linearly to this; None = constant."
    )


#: Flat ``algo.*`` keys of earlier releases -> where they live now.
MOVED_ALGO_KEYS = {
    "advantage": "algo.grpo.advantage",
    "scale_rewards": "algo.grpo.scale_rewards",
    **{k: f"algo.ppo.{k}" for k in PPOConfig.model_fields},
    "kl_coef": "algo.kl.coef",
    "kl_estimator": "algo.kl.estimator",
    "kl_mode": "algo.kl.mode",
    "kl_control": "algo.kl.control",
    "kl_target": "algo.kl.target",
    "kl_horizon": "algo.kl.horizon",
    "kl_decay_rate": "algo.kl.decay_rate",
    "kl_decay_every": "algo.kl.decay_every",
    "lr_schedule": "algo.schedule.lr",
    "warmup_steps": "algo.schedule.warmup_steps",
    "min_lr_ratio": "algo.schedule.min_lr_ratio",
    "entropy_coef_final": "algo.schedule.entropy_final",
    "temperature_final": "algo.schedule.temperature_final",
}


class AlgoConfig(Section):
    name: Literal["grpo", "ppo", "dpo"] = Field(
        "grpo",
        description="RL algorithm: 'grpo' (critic-free, grouped), 'ppo' (critic + GAE) or "
        "'dpo' (each group's best episode preferred to its worst; agentrl.algos.dpo).",
    )
    lr: float = Field(3e-4, gt=0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    clip_eps: float = Field(0.2, gt=0, description="PPO-style ratio clip.")
    epochs: int = Field(1, ge=1, description="Passes over each rollout batch.")
    minibatches: int = Field(2, ge=1, description="Optimizer steps per pass.")
    loss_agg: Literal["token_mean", "seq_mean"] = Field(
        "token_mean", description="Loss aggregation over tokens."
    )
    truncation: Literal["auto", "mask", "zero", "bootstrap"] = Field(
        "auto",
        description="Truncated episodes (max_turns, length): masked out of the loss, scored as "
        "they are, or (PPO) bootstrapped from the value; 'auto' = scored (zero) for both: a "
        "turn budget is part of an agent task, so running into it is a failure.",
    )
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus (seeds: 0.01-0.1).")
    moe_aux_coef: float = Field(
        0.01,
        ge=0,
        description="Mixture-of-Experts models: weight of the router load-balancing loss "
        "(Switch/Mixtral, over the policy tokens only; seeds: 0.01-0.05) in the GRPO / PPO "
        "loss; 0 = off (the moe/ metrics are still logged). No effect on dense models.",
    )
    reward_norm: Literal["none", "running", "clip"] = Field(
        "none", description="Episode rewards: as they are, running mean/std, or clipped to [0, 1]."
    )
    grad_accum: int = Field(1, ge=1, description="Micro-batches per optimizer step.")
    micro_batch_tokens: int | Literal["auto"] = Field(
        "auto",
        description="Max padded tokens per micro-batch: 'auto' = estimated from the free memory "
        "and the model's shapes (half of the free memory at the first update), an int, or 0 = "
        "no limit.",
    )
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    dpo: DPOConfig = Field(default_factory=DPOConfig)
    iql: IQLConfig = Field(
        default_factory=IQLConfig, description="Offline IQL from logs (agentrl offline)."
    )
    kl: KLConfig = Field(default_factory=KLConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        return reject_moved_keys(data, MOVED_ALGO_KEYS, "algo")

    @field_validator("micro_batch_tokens", mode="before")
    @classmethod
    def _check_micro_batch_tokens(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            return v
        raise ValueError("must be 'auto' or an integer >= 0 (0 = no limit)")

    @model_validator(mode="after")
    def _check_flat_groups(self) -> AlgoConfig:
        if self.grpo.skip_flat_groups and (self.name != "grpo" or self.kl.mode != "loss"):
            raise ValueError(
                "algo.grpo.skip_flat_groups drops groups whose advantages are all 0: it needs "
                f"algo.name=grpo (got {self.name!r}) and algo.kl.mode=loss (got "
                f"{self.kl.mode!r}; with the KL in the reward a flat group still has advantages)"
            )
        return self

    @model_validator(mode="after")
    def _check_truncation(self) -> AlgoConfig:
        if self.truncation == "bootstrap" and self.name != "ppo":
            raise ValueError(
                "algo.truncation='bootstrap' needs a value function (algo.name='ppo'); "
                "use 'auto', 'mask' or 'zero' with GRPO"
            )
        return self
