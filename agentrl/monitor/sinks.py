"""Optional metric sinks through their own libraries: TensorBoard, Weights & Biases (offline
by default), MLflow (a SQLite store in the run directory by default: MLflow 3 keeps its file
store in maintenance mode and refuses it unless asked). Each is imported only when
``monitor.report_to`` names it; a missing package is an ImportError naming the extra.

Every sink takes ``log(step, metrics)`` (numbers only; other values are skipped) and
``close(ok)``.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from agentrl.config import Config

EXTRA_HINT = "pip install 'agentrl[monitor]'"


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics record (``step`` and strings left out)."""
    out = {}
    for key, value in metrics.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


def _require(module: str, sink: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"monitor.report_to has {sink!r}, which needs {module}: "
                          f"{EXTRA_HINT}") from err  # fmt: skip


class TensorBoardSink:
    """Scalars in ``run_dir/tensorboard`` (``tensorboard --logdir RUN_DIR/tensorboard``)."""

    def __init__(self, run_dir: Path, cfg: Config) -> None:
        _require("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        for key, value in numeric(metrics).items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self, ok: bool = True) -> None:
        self.writer.close()


class WandbSink:
    """A W&B run in ``run_dir/wandb``; offline unless ``WANDB_MODE`` is set (``wandb sync``
    uploads an offline run later)."""

    def __init__(self, run_dir: Path, cfg: Config) -> None:
        wandb = _require("wandb", "wandb")
        self.run = wandb.init(
            project=cfg.monitor.project,
            name=cfg.monitor.run_name or run_dir.name,
            dir=str(run_dir),
            mode=os.environ.get("WANDB_MODE", "offline"),
            config=cfg.model_dump(mode="json"),
            reinit="create_new",
        )

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.run.log(numeric(metrics), step=step)

    def close(self, ok: bool = True) -> None:
        self.run.finish(exit_code=0 if ok else 1)


class MlflowSink:
    """An MLflow run: ``MLFLOW_TRACKING_URI`` if set, else a SQLite store,
    ``run_dir/mlflow.db`` (``mlflow ui --backend-store-uri sqlite:///RUN_DIR/mlflow.db``)."""

    def __init__(self, run_dir: Path, cfg: Config) -> None:
        _require("mlflow", "mlflow")
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI") or mlflow_store_uri(run_dir)
        self.client = MlflowClient(tracking_uri=uri)
        name = cfg.monitor.project
        found = self.client.get_experiment_by_name(name)
        exp_id = found.experiment_id if found else self.client.create_experiment(name)
        run = self.client.create_run(exp_id, run_name=cfg.monitor.run_name or run_dir.name)
        self.run_id = run.info.run_id
        from mlflow.entities import Param

        params = [Param(k, str(v)[:500]) for k, v in _flatten(cfg.model_dump(mode="json")).items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[i : i + 100])

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        batch = [Metric(k, v, stamp, step) for k, v in numeric(metrics).items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def close(self, ok: bool = True) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED" if ok else "FAILED")


def mlflow_store_uri(run_dir: Path) -> str:
    """The default MLflow store of a run: ``sqlite:///<run_dir>/mlflow.db``."""
    return f"sqlite:///{(Path(run_dir) / 'mlflow.db').resolve()}"


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_installed(cfg: Config) -> None:
    """Raise the ImportError naming the extra now, before model work, for a sink whose
    package is missing."""
    for name in cfg.monitor.report_to:
        if name != "jsonl":
            _require(name, name)


SINK_TYPES = {"tensorboard": TensorBoardSink, "wandb": WandbSink, "mlflow": MlflowSink}


def open_sinks(cfg: Config, run_dir: Path) -> list[Any]:
    """The sinks ``cfg.monitor.report_to`` names besides jsonl (which the run always writes)."""
    return [SINK_TYPES[name](run_dir, cfg) for name in cfg.monitor.report_to if name != "jsonl"]
