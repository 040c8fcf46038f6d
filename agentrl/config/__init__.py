"""One typed config tree with defaults. YAML files and ``--set key=value`` only set values.

A bad key or value fails at start with a message naming the field and what is allowed::

    cfg = load_config("configs/weather_grpo.yaml", overrides=["algo.lr=1e-5"])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from agentrl.config.algo import AlgoConfig, GRPOConfig, KLConfig, PPOConfig, ScheduleConfig
from agentrl.config.base import Section
from agentrl.config.feedback import FeedbackConfig
from agentrl.config.judge import JudgeConfig
from agentrl.config.memory import MemoryConfig
from agentrl.config.monitor import AlertRule, MonitorConfig
from agentrl.config.rollout import RolloutConfig
from agentrl.tools.settings import ToolsConfig

__all__ = [
    "AlertRule",
    "AlgoConfig",
    "Config",
    "ConfigError",
    "GRPOConfig",
    "KLConfig",
    "MemoryConfig",
    "MonitorConfig",
    "PPOConfig",
    "RolloutConfig",
    "ScheduleConfig",
    "build_config",
    "load_config",
    "save_config",
]


#: Named chat templates (agentrl.policy.templates.TEMPLATE_CHOICES; config imports no policy).
CHAT_TEMPLATE_NAMES = ("auto", "qwen2.5")


class ModelConfig(Section):
    name: str = Field(
        "agentrl/tiny",
        description="HF hub id or local path, a .gguf file, a packaged model id "
        "('agentrl/smollm2-135m'), or 'agentrl/tiny' (builds the local tiny model).",
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="'auto' = fp32 on CPU, bf16 on CUDA."
    )
    device: str = Field("auto", description="'auto', 'cpu' or 'cuda[:N]'.")
    chat_template: str = Field(
        "auto",
        description="'auto' (the model's own template if it renders tools, else a GGUF or "
        "packaged model's default), 'qwen2.5' (agentrl's Qwen2.5 tool template), or the path "
        "of a Jinja file.",
    )

    @field_validator("chat_template")
    @classmethod
    def _check_chat_template(cls, value: str) -> str:
        if value in CHAT_TEMPLATE_NAMES or Path(value).expanduser().is_file():
            return value
        raise ValueError(
            f"must be one of {', '.join(CHAT_TEMPLATE_NAMES)} or the path of a Jinja file "
            "(no file is there)"
        )


class TaskConfig(Section):
    env: str = Field("weather", description="Registered environment id (agentrl.envs.make).")
    levels: list[int] = Field(
        default_factory=lambda: [1, 2, 3], description="Difficulty levels sampled during training."
    )
    max_turns: int = Field(6, ge=1, description="Assistant turns before an episode is truncated.")
    last_actions: int = Field(
        0,
        ge=0,
        description="Show the episode's last k tool calls (name, arguments, outcome, repeats "
        "marked) after each turn's observation (agentrl.envs.wrappers.LastActions); 0 = off. "
        "Seed 000 §4.1: k=3 against repeated-call loops.",
    )
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Extra keyword arguments for make()."
    )
    imports: list[str] = Field(
        default_factory=list,
        description="Modules or .py files imported first (they register custom envs).",
    )


class RewardConfig(Section):
    format: float = Field(0.1, description="Weight of the format layer (parsable output).")
    tool_choice: float = Field(0.2, description="Weight of choosing an expected tool.")
    arguments: float = Field(0.3, description="Weight of calling with correct arguments.")
    completion: float = Field(1.0, description="Weight of task completion (the verifier).")
    repeat: float = Field(-0.1, description="Weight per repeated identical call (a penalty).")
    progress: float = Field(
        0.3, description="Weight of a task family's progress (fraction of milestones reached)."
    )
    reask: float = Field(
        -0.1, description="Weight per call re-fetching information already held (a penalty)."
    )
    plan: float = Field(
        0.2,
        description="Weight of the plan layer: the decomposition accuracy of the episode's "
        "plan (rollout.mode=plan_execute only).",
    )

    judge: JudgeConfig = Field(
        default_factory=JudgeConfig,
        description="An LLM judge as a `judge` reward layer (agentrl.rewards.judge); off by "
        "default.",
    )

    def weights(self) -> dict[str, float]:
        """The layer weights (the judge's weight joins a breakdown only where it scored)."""
        return self.model_dump(exclude={"judge"})


class TrainConfig(Section):
    steps: int = Field(30, ge=0, description="RL steps.")
    seed: int = Field(0, description="Seed of everything.")
    eval_episodes: int = Field(
        96, ge=0, description="Held-out evaluation episodes before and after RL."
    )
    eval_levels: list[int] = Field(
        default_factory=lambda: [1, 2, 3], description="Levels in the evaluation mix."
    )
    eval_every: int = Field(
        0,
        ge=0,
        description="Also evaluate every N RL steps (0 = before and after only). Every "
        "evaluation, first and last included, is a line of run_dir/eval.jsonl: the learning curve.",
    )
    eval_seed: int = Field(10_000, description="First seed of the held-out evaluation episodes.")
    eval_dtype: Literal["policy", "rollout"] = Field(
        "policy",
        description="What held-out evaluation and the general check decode with: 'policy' = "
        "the policy's own weights and dtype (an episode does not depend on what shares its "
        "batch: the same weights score the same); 'rollout' = rollout.dtype's copy, faster "
        "where bf16 is native, but its rounding depends on the batch.",
    )
    general_check: bool = Field(
        True,
        description="Also score the general-capability check (48 plain questions, no tools) "
        "before and after RL: general_before / general_after / general_drop in the summary.",
    )
    seed_limit: int = Field(10_000, ge=1, description="Training seeds: [0, seed_limit).")
    warmstart_demos: int = Field(
        64,
        ge=0,
        description="Reference demonstrations for the SFT warm start (0 = none); a few dozen, "
        "as in the seeds (003 section 6.4).",
    )
    warmstart_levels: list[int] = Field(default_factory=lambda: [1, 2, 3],
                                        description="Demonstration levels.")  # fmt: skip
    warmstart_epochs: int = Field(4, ge=1, description="Passes over the demonstrations.")
    warmstart_lr: float = Field(1e-3, gt=0)
    warmstart_batch_size: int = Field(8, ge=1, description="Demonstrations per SFT step "
                                      "(fewer: more updates for the same data).")  # fmt: skip
    warmstart_stop_loss: float | None = Field(None, gt=0, description="Stop the warm-start SFT "
        "once its 10-step mean loss is at or below this (None: all epochs): a warm start near "
        "loss 0 samples nearly one action, leaving RL's groups little to compare.")  # fmt: skip
    warmstart_seed: int = Field(5_000, description="Seed of the first warm-start demonstration.")
    warmstart_from: str | None = Field(
        None,
        description="A run directory whose saved warm start (checkpoints/rl_start.pt) this run "
        "starts from instead of its own SFT: the same base model, the SFT not redone.",
    )
    run_dir: str = Field("runs/run", description="Output directory.")
    save_model: bool = Field(True, description="Save the final model in run_dir/model.")
    checkpoint_every: int = Field(
        50, ge=0, description="Checkpoint every N RL steps (0 = only on SIGTERM / stop)."
    )
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept (the newest).")
    nan_patience: int = Field(
        3, ge=1, description="Non-finite updates in a row that stop the run (each one is skipped)."
    )
    gradient_checkpointing: bool = Field(False, description="Recompute activations (less memory).")
    feedback: FeedbackConfig = Field(
        default_factory=FeedbackConfig,
        description="Live human feedback: ratings / corrections folded into the next updates.",
    )
    autocast: Literal["auto", "off", "bf16"] = Field(
        "auto",
        description="bf16 autocast in updates and the warm start; 'auto' = where bf16 matmuls "
        "are native (a CUDA GPU, a CPU with AMX-BF16 or AVX512-BF16).",
    )

    @field_validator("autocast", mode="before")
    @classmethod
    def _off_is_a_word(cls, value: Any) -> Any:
        """YAML reads a bare ``off`` (``--set train.autocast=off``) as False."""
        return "off" if value is False else value

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "log_every" in data:
            raise ValueError("train.log_every was removed: every RL step is a metrics.jsonl line")
        return data

    @model_validator(mode="after")
    def _check_eval_every(self) -> TrainConfig:
        if self.eval_every and not self.eval_episodes:
            raise ValueError(
                f"train.eval_every={self.eval_every} needs held-out episodes: set "
                "train.eval_episodes > 0 (or eval_every=0)"
            )
        return self


class LoraConfig(Section):
    """LoRA adapters through peft (parameter-efficient RL)."""

    enabled: bool = Field(False, description="Train LoRA adapters instead of all weights.")
    rank: int = Field(8, ge=1, description="Adapter rank r.")
    alpha: float = Field(16.0, gt=0, description="Adapter scale alpha (update x alpha / r).")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Module names that get adapters.",
    )
    lr_scale: float = Field(
        0.2, gt=0, description="LoRA LR = algo.lr x this (seeds: 1/5-1/10 of full fine-tuning)."
    )
    merge_on_save: bool = Field(
        True, description="Save the merged model in run_dir/model (adapter in run_dir/adapter)."
    )


class CurriculumConfig(Section):
    """Curriculum (agentrl.curriculum): stages of env ids and success-rate level changes."""

    enabled: bool = Field(False, description="Sample tasks from the curriculum.")
    staged: bool = Field(
        False,
        description="Train through the env ids of `stages` (one stage after the other, each "
        "family's level moved by rolling success) instead of the levels of task.env alone; "
        "task.env stays the held-out evaluation target. Needs enabled=true.",
    )
    stages: list[list[str]] = Field(
        default_factory=lambda: [
            ["weather"],
            ["meeting", "shop", "math"],
            ["library"],
            ["dynamic"],
        ],
        description="Env ids per stage: 1 single tool, 2 fixed flows, 3 open library, 4 dynamic.",
    )
    promote_above: float = Field(0.8, gt=0, le=1, description="Rolling success > this: harder.")
    demote_below: float = Field(0.2, ge=0, lt=1, description="Rolling success < this: easier.")
    window: int = Field(32, ge=1, description="Episodes in the rolling success window.")
    review_fraction: float = Field(
        0.1, ge=0, le=1, description="Share of tasks drawn from earlier stages (no forgetting)."
    )
    level_review: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of a family's tasks drawn from the lower levels it has passed (they "
        "never move levels): keeps level 1 from being forgotten while level 2 still fails.",
    )

    def env_ids(self) -> list[str]:
        """Every env id of ``stages``, once each, in stage order."""
        return list(dict.fromkeys(e for stage in self.stages for e in stage))


class Config(Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    tools: ToolsConfig = Field(
        default_factory=ToolsConfig,
        description="ToolGuard: process mode, timeouts, breaker, fallbacks, sandbox.",
    )

    @model_validator(mode="after")
    def _check_staged(self) -> Config:
        if self.curriculum.staged and not self.curriculum.enabled:
            raise ValueError(
                "curriculum.staged=true trains through curriculum.stages: set "
                "curriculum.enabled=true as well (or staged=false)"
            )
        if self.rollout.mode == "hierarchical" and (
            self.algo.name != "grpo" or self.curriculum.staged
        ):
            raise ValueError(
                "rollout.mode=hierarchical trains manager and worker segments with GRPO "
                "advantages at two time scales: set algo.name=grpo (got "
                f"{self.algo.name!r}) and curriculum.staged=false"
            )
        if self.rollout.hierarchy.adapters == "per_role" and not (
            self.lora.enabled and self.rollout.mode == "hierarchical"
        ):
            raise ValueError(
                "rollout.hierarchy.adapters=per_role gives the manager and the worker a LoRA "
                "adapter each: set lora.enabled=true and rollout.mode=hierarchical (got "
                f"lora.enabled={self.lora.enabled}, rollout.mode={self.rollout.mode!r})"
            )
        return self

    @model_validator(mode="after")
    def _check_flat_groups(self) -> Config:
        if self.algo.grpo.skip_flat_groups and self.rollout.mode == "hierarchical":
            raise ValueError(
                "algo.grpo.skip_flat_groups judges groups by the episode reward, but "
                "rollout.mode=hierarchical gives the manager its own advantages: set "
                "skip_flat_groups=false or another rollout.mode"
            )
        return self


class ConfigError(ValueError):
    """A config file or override that does not fit the schema; the message names the field."""


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "(root)"
        if e["type"] == "extra_forbidden":
            lines.append(f"unknown config field {field!r}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"config field {field!r}: {msg} (got {e.get('input')!r})")
    return "; ".join(lines)


def _allowed_fields(model: type[BaseModel], path: list[str]) -> list[str]:
    for key in path:
        field = model.model_fields.get(key)
        if field is None or not (
            isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        ):
            return list(model.model_fields)
        model = field.annotation
    return list(model.model_fields)


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply one ``a.b.c=value`` (value parsed as YAML) to a nested dict in place."""
    if "=" not in override:
        raise ConfigError(f"override {override!r} must look like section.field=value")
    key, raw = override.split("=", 1)
    parts = key.strip().split(".")
    node = data
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {override!r}: {p!r} is not a section")
    node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""


def build_config(data: dict[str, Any] | None = None, overrides: list[str] | None = None) -> Config:
    """Validate a nested dict (plus overrides) into a Config, or raise ConfigError."""
    data = dict(data or {})
    for ov in overrides or []:
        apply_override(data, ov)
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        msg = _format_errors(err)
        first = err.errors()[0]
        if first["type"] == "extra_forbidden":
            loc = [str(p) for p in first["loc"]]
            msg += f"; allowed here: {', '.join(_allowed_fields(Config, loc[:-1]))}"
        raise ConfigError(msg) from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read a YAML file (or nothing: defaults) and apply ``--set`` overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        loaded = yaml.safe_load(p.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {str(p)!r} must hold a mapping of sections")
        data = loaded
    return build_config(data, overrides)


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
