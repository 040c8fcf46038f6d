"""``agentrl plot``: a run directory's training curves and the interaction timeline of chosen
episodes as PNG files (seed 003 §3.4: plot the training and the agent's interaction).

``training.png``: reward per layer, success (training episodes and held-out evaluations), KL,
entropy, value loss and tool failure rates per class, against RL steps done.
``timeline.png``: one row per chosen episode, one column per assistant turn: which tool was
called when (a marker per call, hollow where the call failed), the final answer (a star,
green when the task was solved), each turn's shaping scores and the episode's total reward.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agentrl.monitor.rundata import RunData

#: The panels of training.png: title, the metric keys (a regex) and the y label.
PANELS: list[tuple[str, str, str]] = [
    ("reward per layer", r"reward/(?!std$)[a-z_]+$", "mean over the step's episodes"),
    ("success", r"rollout/success_rate$", "share of episodes solved"),
    ("KL to the reference", r"loss/kl$", "KL"),
    ("policy entropy", r"policy/entropy$", "nats per token"),
    ("value loss", r"loss/value$", "PPO critic loss"),
    ("tool failures per class", r"tool/.+_rate$", "share of that tool's calls"),
]


def _pyplot():
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError("agentrl plot needs matplotlib: pip install 'agentrl[monitor]'") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def metric_series(data: RunData, pattern: str) -> dict[str, tuple[list[int], list[float]]]:
    """``{key: (steps done, values)}`` for every logged key matching ``pattern``."""
    rx = re.compile(pattern)
    keys = sorted({k for m in data.metrics for k in m if rx.match(k)})
    out = {}
    for key in keys:
        points = data.points(key)
        if points:
            out[key] = ([s for s, _ in points], [v for _, v in points])
    return out


def plot_training(data: RunData, path: Path) -> Path:
    """training.png: the PANELS in a grid; a panel with no logged metric says so."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (title, pattern, ylabel) in zip(axes.flat, PANELS, strict=True):
        series = metric_series(data, pattern)
        for key, (xs, ys) in series.items():
            bold = key in ("reward/total", "rollout/success_rate")
            ax.plot(xs, ys, marker=".", linewidth=2.2 if bold else 1.2,
                    label=key.split("/", 1)[1])  # fmt: skip
        if title == "success" and data.evals:
            ax.plot([p["step"] for p in data.evals], [p["success_rate"] for p in data.evals],
                    marker="o", linestyle="--", label="held-out (greedy)")  # fmt: skip
            series = series or {"eval": ([], [])}
        if not series:
            ax.text(0.5, 0.5, "not logged by this run", ha="center", va="center",
                    transform=ax.transAxes, color="grey")  # fmt: skip
        else:
            ax.legend(fontsize=7, loc="best")
        ax.set_title(title)
        ax.set_xlabel("RL steps done")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{data.path.name if data.path else 'run'}: {len(data.metrics)} steps logged")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def choose_episodes(episodes: list[dict[str, Any]], n: int = 6) -> list[dict[str, Any]]:
    """From the newest step: the best and worst rewarded and one of each other termination
    reason, up to ``n`` (an episode is a ``trajectories.jsonl`` record)."""
    if not episodes:
        return []
    last = max(int(e.get("step", 0)) for e in episodes)
    pool = sorted((e for e in episodes if int(e.get("step", 0)) == last),
                  key=lambda e: -float((e.get("reward") or {}).get("total", 0.0)))  # fmt: skip
    chosen = [pool[0], pool[-1]] if len(pool) > 1 else pool[:1]
    for e in pool:
        if len(chosen) >= n:
            break
        if e["termination"] not in {c["termination"] for c in chosen}:
            chosen.append(e)
    for e in pool:  # fill up with the rest, best first
        if len(chosen) >= n:
            break
        if all(e is not c for c in chosen):
            chosen.append(e)
    return chosen[:n]


def call_turns(episode: dict[str, Any]) -> list[int]:
    """The assistant turn of each tool call: the record's ``turn``, or counted from the
    assistant messages (older runs)."""
    calls = episode.get("tool_calls") or []
    if all("turn" in c for c in calls):
        return [int(c["turn"]) for c in calls]
    turns = []
    assistant = [m for m in episode.get("messages", []) if m.get("role") == "assistant"]
    for i, m in enumerate(assistant):
        turns += [i] * len(m.get("tool_calls") or [])
    return (turns + [len(assistant) - 1] * len(calls))[: len(calls)]


def plot_timeline(episodes: list[dict[str, Any]], path: Path) -> Path:
    """timeline.png: the interaction of each chosen episode, turn by turn."""
    plt = _pyplot()
    rows = max(len(episodes), 1)
    fig, ax = plt.subplots(figsize=(13, 1.1 * rows + 1.5))
    tools = sorted({c["name"] for e in episodes for c in e.get("tool_calls") or []})
    colour = {name: plt.cm.tab10(i % 10) for i, name in enumerate(tools)}
    width, labels = 1, []
    for row, ep in enumerate(episodes):
        y = rows - 1 - row
        per_turn = (ep.get("reward") or {}).get("per_turn") or []
        turns, calls = call_turns(ep), ep.get("tool_calls") or []
        width = max(width, len(per_turn), *(t + 1 for t in turns))
        offsets: dict[int, int] = {}
        for call, turn in zip(calls, turns, strict=True):
            k = offsets[turn] = offsets.get(turn, -1) + 1
            face = colour[call["name"]] if call.get("ok", True) else "none"
            ax.scatter(turn + 0.12 * k, y, s=120, marker="o", facecolors=face,
                       edgecolors=colour[call["name"]], linewidths=2, zorder=3)  # fmt: skip
        last = len(per_turn) - 1
        if ep["termination"] in ("success", "failure") and last >= 0:
            ax.scatter(last + 0.3, y, s=220, marker="*", zorder=3,
                       color="tab:green" if ep.get("success") else "tab:red")  # fmt: skip
        for t, scores in enumerate(per_turn):
            text = " ".join(f"{k[0]}{v:.1f}" for k, v in scores.items() if k != "repeat")
            if scores.get("repeat"):
                text += " R"
            ax.text(t, y - 0.32, text, fontsize=6, ha="center", color="dimgrey")
        total = float((ep.get("reward") or {}).get("total", 0.0))
        labels.append(f"{ep.get('task_id', '?')}\n{ep['termination']} r={total:.2f}")
    for name in tools:
        ax.scatter([], [], color=colour[name], label=name)
    ax.scatter([], [], marker="o", facecolors="none", edgecolors="black", label="call failed")
    ax.scatter([], [], marker="*", color="tab:green", s=120, label="answer (solved)")
    ax.set_xlim(-0.5, width + 0.5)
    ax.set_ylim(-0.8, rows - 0.4)
    ax.set_yticks(range(rows - 1, rows - 1 - len(labels), -1), labels, fontsize=7)
    ax.set_xticks(range(width))
    ax.set_xlabel("assistant turn  (under each turn: f=format t=tool_choice a=arguments, "
                  "R=a repeated call)")  # fmt: skip
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"interaction timeline: {len(episodes)} episode(s)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_run(data: RunData, out_dir: Path, episodes: int = 6) -> list[Path]:
    """Write training.png and (where the run logged episodes) timeline.png into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [plot_training(data, out_dir / "training.png")]
    chosen = choose_episodes(data.episodes, episodes)
    if chosen:
        written.append(plot_timeline(chosen, out_dir / "timeline.png"))
    return written
