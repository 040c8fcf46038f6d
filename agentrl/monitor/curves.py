"""Learning curves from run directories: held-out success vs RL steps, episodes and seconds.

A run trained with ``train.eval_every=N`` writes one ``eval.jsonl`` line per held-out
evaluation (step 0 = before RL, the last = after RL). ``load_curve`` joins it with the
training seconds summed from ``metrics.jsonl`` (evaluation time excluded), so runs of
different algorithms or samplers compare on equal terms: ``first_reaching`` says how many
episodes (or seconds) a run needed to reach a success level and ``cost_ratio`` compares two.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.monitor.metrics import read_jsonl

#: The learning curve the trainer writes: one line per held-out evaluation, first and last too.
EVAL_LOG = "eval.jsonl"
METRICS_LOG = "metrics.jsonl"


def train_seconds_by_step(metrics: list[dict[str, Any]]) -> dict[int, float]:
    """``{completed steps: training seconds so far}`` from per-step ``time/step_s``."""
    out, total = {0: 0.0}, 0.0
    for m in sorted(metrics, key=lambda m: m["step"]):
        total += float(m.get("time/step_s", 0.0))
        out[int(m["step"]) + 1] = total
    return out


def load_curve(run_dir: str | Path) -> list[dict[str, Any]]:
    """The run's evaluation points, each with ``train_s`` (training seconds before it).

    Raises ``FileNotFoundError`` naming the option to set when the run has no ``eval.jsonl``.
    """
    run = Path(run_dir)
    path = run / EVAL_LOG
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: train with train.eval_episodes > 0 "
            "(and train.eval_every=N for points during RL)"
        )
    points = read_jsonl(path)
    metrics = read_jsonl(run / METRICS_LOG)
    seconds = train_seconds_by_step(metrics)
    return [{**p, "train_s": seconds.get(int(p["step"]))} for p in points]


def first_reaching(curve: list[dict[str, Any]], target: float, x: str = "episodes") -> Any:
    """``x`` (``episodes``, ``step`` or ``train_s``) of the first point with success >= target.

    ``None`` when the run never reaches it.
    """
    for p in curve:
        if p["success_rate"] >= target - 1e-12:
            return p[x]
    return None


def shared_target(curves: list[list[dict[str, Any]]]) -> float:
    """The highest success every run reached: the min over runs of each run's best point."""
    return min(max(p["success_rate"] for p in c) for c in curves)


def cost_ratio(
    slow: list[dict[str, Any]], fast: list[dict[str, Any]], target: float, x: str = "episodes"
) -> float | None:
    """How many times more ``x`` ``slow`` needed than ``fast`` to reach ``target``.

    ``None`` when either never reaches it or ``fast`` was there from the start (x = 0).
    """
    a, b = first_reaching(slow, target, x), first_reaching(fast, target, x)
    if a is None or b is None or not b:
        return None
    return a / b


def format_curve(name: str, curve: list[dict[str, Any]]) -> str:
    """A plain-text table: step, episodes, training seconds, success overall and per level."""
    lines = [f"{name}", f"  {'step':>5} {'episodes':>9} {'train_s':>8} {'success':>8}  by level"]
    for p in curve:
        secs = "-" if p.get("train_s") is None else f"{p['train_s']:.0f}"
        levels = " ".join(f"L{k}={v:.2f}" for k, v in p["success_by_level"].items())
        lines.append(
            f"  {p['step']:>5} {p['episodes']:>9} {secs:>8} {p['success_rate']:>8.3f}  {levels}"
        )
    return "\n".join(lines)


def plot_curves(curves: dict[str, list[dict[str, Any]]], path: str | Path) -> Path:
    """Success vs episodes and vs training seconds, one line per run, saved as an image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for name, curve in curves.items():
        ys = [p["success_rate"] for p in curve]
        axes[0].plot([p["episodes"] for p in curve], ys, marker="o", label=name)
        timed = [p for p in curve if p.get("train_s") is not None]
        axes[1].plot([p["train_s"] for p in timed], [p["success_rate"] for p in timed],
                     marker="o", label=name)  # fmt: skip
    axes[0].set_xlabel("training episodes")
    axes[1].set_xlabel("training seconds (evaluation excluded)")
    axes[0].set_ylabel("held-out success")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
