"""``monitor``: where a run's metrics go besides metrics.jsonl, and the alert rules on them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agentrl.config.base import Section

SINKS = ("jsonl", "tensorboard", "wandb", "mlflow")


class AlertRule(Section):
    """One alert: a condition on a metric of metrics.jsonl over the last ``window`` steps.

    ``kind``: ``above`` / ``below`` (the window's mean beyond ``threshold``), ``nonfinite``
    (the latest value NaN or infinite), ``drop`` (the mean of the window's second half below
    that of its first half by more than ``threshold`` as a fraction of it), ``rise_while_flat``
    (``metric`` up by more than ``threshold`` between the halves while ``other`` moved less
    than ``flat``). ``metric`` may be a glob (``tool/*/timeout_rate``: the largest match).
    """

    name: str = Field(description="Stable name, in alerts.jsonl and the console.")
    metric: str = Field(description="A metrics.jsonl key or a glob over keys.")
    kind: Literal["above", "below", "nonfinite", "drop", "rise_while_flat"] = "above"
    threshold: float = Field(0.0, description="The bound (a fraction for drop and rises).")
    window: int = Field(1, ge=1, description="Steps the condition is computed over.")
    other: str | None = Field(None, description="rise_while_flat: the metric that stays flat.")
    flat: float = Field(0.02, ge=0, description="rise_while_flat: how little 'other' may move.")
    action: Literal["warn", "stop"] = Field(
        "warn", description="warn, or stop the run after a checkpoint (resume with --resume)."
    )

    @model_validator(mode="after")
    def _check_shape(self) -> AlertRule:
        if self.kind == "rise_while_flat" and not self.other:
            raise ValueError(f"alert {self.name!r}: kind rise_while_flat needs 'other'")
        if self.kind in ("drop", "rise_while_flat") and self.window < 2:
            raise ValueError(f"alert {self.name!r}: kind {self.kind} needs window >= 2")
        return self


def default_alerts() -> list[AlertRule]:
    """What a run watches unless ``monitor.alerts`` says otherwise (seed 003 sections 3.4,
    6.3): a KL blow-up, a non-finite reward, entropy collapse, tool timeouts, and the format
    layer rising while task completion stays flat (reward hacking through the format), and a
    Mixture-of-Experts router collapsing onto one expert."""
    return [
        AlertRule(name="kl_explosion", metric="loss/kl", threshold=1.0),
        AlertRule(name="reward_nonfinite", metric="reward/total", kind="nonfinite"),
        AlertRule(
            name="entropy_collapse", metric="policy/entropy", kind="drop", threshold=0.8, window=20
        ),  # fmt: skip
        AlertRule(name="tool_timeouts", metric="tool/*/timeout_rate", threshold=0.2, window=3),
        AlertRule(
            name="format_hacking",
            metric="reward/format",
            kind="rise_while_flat",
            other="reward/completion",
            threshold=0.2,
            window=10,
        ),  # fmt: skip
        # Mixture of Experts (agentrl.algos.moe): one expert is the first choice of most
        # policy tokens at some layer: 3/4 of first choices, 3x balance with 4 experts (logged
        # with >= 4 experts; dense models never fire; the tiny MoE's RL runs sat at 0.47-0.61)
        AlertRule(name="moe_collapse", metric="moe/collapse_share", threshold=0.75, window=3),
    ]


class MonitorConfig(Section):
    """Metric sinks and alerts (``agentrl doctor`` reads the run directory afterwards)."""

    report_to: list[Literal["jsonl", "tensorboard", "wandb", "mlflow"]] = Field(
        default_factory=lambda: ["jsonl"],
        description="Sinks of every step's metrics and every evaluation: jsonl (always on: "
        "run_dir/metrics.jsonl), tensorboard (run_dir/tensorboard), wandb (offline unless "
        "WANDB_MODE says otherwise: run_dir/wandb), mlflow (MLFLOW_TRACKING_URI, else a SQLite "
        "store, run_dir/mlflow.db). Each needs its package: pip install 'agentrl[monitor]'.",
    )
    project: str = Field("agentrl", description="W&B project / MLflow experiment name.")
    run_name: str | None = Field(None, description="Run name in W&B / MLflow (default run_dir).")
    alerts: list[AlertRule] = Field(
        default_factory=default_alerts,
        description="Alert rules (a list of {name, metric, kind, threshold, window, action}); "
        "[] turns them off. Each alert goes to the console and run_dir/alerts.jsonl.",
    )
    webhook: str | None = Field(
        None, description="An http(s) URL each alert is POSTed to as JSON (optional)."
    )
    webhook_timeout_s: float = Field(3.0, gt=0, description="Seconds a webhook POST may take.")

    @model_validator(mode="after")
    def _check(self) -> MonitorConfig:
        names = [r.name for r in self.alerts]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"alert names must be unique; repeated: {dup}")
        if self.webhook and not self.webhook.startswith(("http://", "https://")):
            raise ValueError(f"monitor.webhook must be an http(s) URL, got {self.webhook!r}")
        return self
