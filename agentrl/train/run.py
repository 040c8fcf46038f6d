"""A run directory and its bookkeeping: config.yaml, the JSONL sinks (opened and closed in one
place), held-out evaluations, checkpoint cadence, SIGTERM, the NaN-guard stop, the summary."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from agentrl.algos.update import NonFiniteError
from agentrl.checkpoint import (
    START_FILE,
    TermSignal,
    latest_checkpoint,
    load_checkpoint,
    save_atomic,
    save_checkpoint,
    step_dir,
)
from agentrl.config import Config, save_config
from agentrl.eval.general import general_check
from agentrl.eval.runner import eval_specs, evaluate, summarize
from agentrl.monitor.alerts import AlertMonitor
from agentrl.monitor.curves import EVAL_LOG
from agentrl.monitor.metrics import JsonlSink, read_jsonl
from agentrl.monitor.sinks import open_sinks
from agentrl.monitor.spans import mask_spans
from agentrl.sft import plain_progress
from agentrl.train.feedback import episode_id
from agentrl.train.state import LoopState, checkpoint_parts, restore_parts
from agentrl.types import Trajectory


class Run:
    """One run directory (``train.run_dir``): a fresh run, or one resumed from its newest
    complete checkpoint."""

    def __init__(self, cfg: Config, console: Console, resume: bool = False) -> None:
        self.cfg, self.console, self.t_start = cfg, console, time.time()
        self.dir = Path(cfg.train.run_dir)
        self.ckpt_dir = self.dir / "checkpoints"
        self.resume_from = latest_checkpoint(self.ckpt_dir) if resume else None
        if resume and self.resume_from is None:
            raise FileNotFoundError(f"--resume: no complete checkpoint in {self.ckpt_dir}")
        self.dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, self.dir / "config.yaml")
        self.logs = [self.dir / name for name in ("metrics.jsonl", "trajectories.jsonl", EVAL_LOG)]
        self.saved_at, self.interrupted = 0, False
        self.term: TermSignal | None = None
        self.sinks: list[Any] = []  # monitor.report_to besides jsonl, open while recording
        self._pending: list[tuple[int, dict[str, Any]]] = []  # evaluations before they open
        self.sinks_open = False
        self.alerts = AlertMonitor(cfg.monitor.alerts, self.dir, webhook=cfg.monitor.webhook,
                                   webhook_timeout_s=cfg.monitor.webhook_timeout_s,
                                   report=console.print)  # fmt: skip
        self.stopped_by: str | None = None
        #: token ids -> text; where set, each logged episode carries its loss-mask spans
        self.decode: Callable[[list[int]], str] | None = None

    @property
    def fresh(self) -> bool:
        """True unless resumed (a resumed run had its warm start and first evaluation)."""
        return self.resume_from is None

    # -- evaluation ------------------------------------------------------------------------
    def evaluate(self, generator, make_env, when: str, step: int,
                 program: Any = None) -> dict[str, Any]:  # fmt: skip
        """Held-out evaluation ``when`` = before / during / after RL, a line of eval.jsonl.

        ``program`` (a ``train --agent`` run's ``AgentCollector``): the same held-out tasks are
        also played by the agent program with greedy decoding; its success (harness faults
        left out of the rate) goes in ``summary["program"]`` and ``eval_<when>_program.jsonl``.
        """
        c = self.cfg
        if c.train.eval_dtype == "policy" and hasattr(generator, "in_own_dtype"):
            generator = generator.in_own_dtype()  # reproducible: no batch-dependent bf16 copy
        summary, trajs = evaluate(
            generator, make_env, episodes=c.train.eval_episodes, levels=c.train.eval_levels,
            seed0=c.train.eval_seed, max_new_tokens=c.rollout.max_new_tokens,
            max_total_tokens=c.rollout.max_total_tokens, memory=c.rollout.memory,
            constrained=c.rollout.constrained,
            hierarchy=c.rollout.hierarchy if c.rollout.mode == "hierarchical" else None,
            on_episode=self._eval_progress(when),
        )  # fmt: skip
        if program is not None:
            specs = eval_specs(c.train.eval_episodes, c.train.eval_levels, c.train.eval_seed)
            played, _ = program.play(specs, (True, 0.0, 1.0))
            summary["program"] = program_summary(played)
            if when != "during":
                write_records(self.dir / f"eval_{when}_program.jsonl",
                              [t.to_record() for t in played])  # fmt: skip
        if when != "during" and c.train.general_check:
            general = general_check(generator, generator.tokenizer)
            write_records(self.dir / f"general_{when}.jsonl", general.pop("replies"))
            summary["general"] = general
        point = curve_point(step, step * self.episodes_per_step, summary)
        if when == "before":  # a new curve
            (self.dir / EVAL_LOG).write_text(json.dumps(point) + "\n")
        else:
            write_records(self.dir / EVAL_LOG, [point])
        if when != "during":
            write_records(self.dir / f"eval_{when}.jsonl", [t.to_record() for t in trajs])
        self._to_sinks(step, eval_metrics(point))
        return summary

    def _eval_progress(self, when: str):
        """Plain lines on about every tenth episode of an evaluation before / after RL: a long
        evaluation (the ledger's can take an hour) shows it is moving, in a log file too."""
        if when == "during":
            return None
        advance = plain_progress(self.cfg.train.eval_episodes, unit="episodes",
                                 emit=self.console.print)  # fmt: skip
        return lambda _finished, _total: advance(f"evaluating {when} RL")

    @property
    def episodes_per_step(self) -> int:
        return self.cfg.rollout.groups_per_step * self.cfg.rollout.group_size

    # -- RL start and checkpoints ----------------------------------------------------------
    def start_weights(self, model, device: str) -> None:
        """Save the weights at RL start (the reference); a resumed run loads them back."""
        if self.fresh:
            save_atomic(self.ckpt_dir / START_FILE, model.state_dict())
        else:
            model.load_state_dict(torch.load(self.ckpt_dir / START_FILE, map_location=device))

    def restore(self, rl, optimizer, state: LoopState) -> int:
        """Steps already done: 0, or a resumed run's checkpoint loaded into everything."""
        if self.fresh:
            return 0
        start = restore_parts(load_checkpoint(self.resume_from), rl, optimizer, state, self.dir)
        self.saved_at = start
        self.console.print(f"resumed from {self.resume_from} after {start} steps")
        return start

    @contextmanager
    def recording(self, rl, optimizer, state: LoopState) -> Iterator[Run]:
        """Sinks open and SIGTERM caught for the RL steps and the last evaluation; everything
        closed on any exit (the optional sinks marked failed on an exception)."""
        self._parts = (rl, optimizer, state)
        if not self.fresh:  # alert windows span the resume
            self.alerts.seed(read_jsonl(self.logs[0]))
        self.metrics, self.trajectories = JsonlSink(self.logs[0]), JsonlSink(self.logs[1])
        ok = False
        try:
            self.sinks, self.sinks_open = open_sinks(self.cfg, self.dir), True
            pending, self._pending = self._pending, []
            for step, record in pending:
                self._to_sinks(step, record)
            with TermSignal() as self.term:
                yield self
            ok = True
        finally:
            self.metrics.close()
            self.trajectories.close()
            for sink in self.sinks:
                sink.close(ok)
            self.sinks, self.sinks_open = [], False

    def _to_sinks(self, step: int, record: dict[str, Any]) -> None:
        if not self.sinks_open:  # an evaluation before recording: held until the sinks open
            self._pending.append((step, record))
        for sink in self.sinks:
            sink.log(step, record)

    def log_step(self, step: int, metrics: dict[str, Any], trajs: list[Trajectory]) -> None:
        """A step's metrics to every sink and the alert rules; its episodes to
        trajectories.jsonl."""
        self.metrics.write(metrics)
        for k, t in enumerate(trajs):  # the episode id: what a person's feedback names
            record = {"step": step, "episode_id": episode_id(step, k), **t.to_record()}
            if self.decode is not None:
                record["spans"] = mask_spans(t.token_ids, t.loss_mask, self.decode)
            self.trajectories.write(record)
        for sink in self.sinks:
            sink.log(step + 1, metrics)  # steps done: the x of the evaluation points too
        self.alerts.observe(step, metrics)
        skipped = int(metrics.get("policy/skipped_updates", 0))
        if skipped:
            self.console.print(f"[yellow]step {step}: {skipped} update(s) skipped: non-finite "
                               "loss or gradient norm[/]")  # fmt: skip

    def end_step(self, done: int, stepped: list[bool]) -> None:
        """Checkpoint on cadence, on SIGTERM, or when the NaN guard stops the run (raises)."""
        state = self._parts[2]
        diverged = state.guard.observe(stepped)
        every = self.cfg.train.checkpoint_every
        if diverged or self.term.requested or (every and done % every == 0):
            self.checkpoint(done)
        if diverged:
            raise NonFiniteError(
                f"{state.guard.in_a_row} non-finite updates in a row (train.nan_patience="
                f"{self.cfg.train.nan_patience}) at step {done - 1}: the run stopped. The last "
                f"good weights are checkpointed in {step_dir(self.ckpt_dir, self.saved_at)}. "
                "Lower algo.lr, check the rewards for NaN/Inf, or set train.autocast=off."
            )

    def stop_requested(self, done: int) -> bool:
        """After SIGTERM or an alert whose action is ``stop``: make sure step ``done`` is
        checkpointed, say how to resume."""
        stop = self.alerts.stop
        if not self.term.requested and stop is None:
            return False
        if self.saved_at < done:
            self.checkpoint(done)
        self.interrupted = True
        why = "SIGTERM" if stop is None else f"alert {stop.rule} ({stop.message})"
        self.stopped_by = "sigterm" if stop is None else f"alert:{stop.rule}"
        self.console.print(f"{why}: stopped after step {done}, checkpoint in "
                           f"{step_dir(self.ckpt_dir, self.saved_at)}; continue with: "
                           f"agentrl train --resume {self.dir} [--set ...]")  # fmt: skip
        return True

    def checkpoint(self, done: int) -> None:
        parts = checkpoint_parts(done, *self._parts, self.logs)
        save_checkpoint(self.ckpt_dir, done, parts, self.cfg.train.keep_checkpoints)
        self.saved_at = done

    # -- the end -----------------------------------------------------------------------------
    def summary(self, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
        """The run's summary, also written to summary.json."""
        c = self.cfg
        summary = {
            "success_before": before.get("success_rate"),
            "success_after": after.get("success_rate"),
            "episodes": c.train.eval_episodes,
            **general_figures(before, after),
            "eval_before": before,
            "eval_after": after,
            "steps": c.train.steps,
            "algo": c.algo.name,
            "interrupted": self.interrupted,
            "stopped_by": self.stopped_by,
            "run_dir": str(self.dir),
            "wall_s": round(time.time() - self.t_start, 1),
        }
        if "program" in before or "program" in after:  # a train --agent run
            summary["program_success_before"] = before.get("program", {}).get("success_rate")
            summary["program_success_after"] = after.get("program", {}).get("success_rate")
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary


def curve_point(step: int, episodes: int, summary: dict[str, Any]) -> dict[str, Any]:
    """A line of ``eval.jsonl``: held-out success after ``step`` RL steps, ``episodes`` played
    (and the general-capability accuracy where it was checked; a plan-and-execute run's
    decomposition accuracy and planned rate)."""
    keep = ("success_rate", "success_by_level", "success_by_family", "mean_tool_calls",
            "terminations", "repeated_call_rate", "format_error_rate",
            "decomposition_accuracy", "planned_rate", "first_tool_rate",
            "first_tool_by_level", "first_tool_by_family")  # fmt: skip
    point = {"step": step, "episodes": episodes, **{k: summary[k] for k in keep if k in summary}}
    if "general" in summary:
        point["general_accuracy"] = summary["general"]["accuracy"]
    if "program" in summary:
        point["program"] = summary["program"]
    return point


def program_summary(trajs: list[Trajectory]) -> dict[str, Any]:
    """An agent program's held-out episodes: success overall and per level over the episodes
    it finished (a harness fault is never scored), and how many were harness faults."""
    scored = [t for t in trajs if not t.is_harness_fault]
    summary = summarize(scored)
    return {**{k: summary[k] for k in ("success_rate", "success_by_level", "episodes")},
            "harness_faults": len(trajs) - len(scored)}  # fmt: skip


def eval_metrics(point: dict[str, Any]) -> dict[str, float]:
    """An eval.jsonl point as sink metrics: ``eval/success_rate``, ``eval/success/level_<n>``,
    ``eval/success/<family>`` (a mix of families),
    ``eval/general_accuracy``, ``eval/repeated_call_rate``, ``eval/format_error_rate``,
    ``eval/decomposition_accuracy``, ``eval/first_tool_rate``."""
    out = {"eval/success_rate": point["success_rate"]}
    for level, rate in point["success_by_level"].items():
        out[f"eval/success/level_{level}"] = rate
    for family, rate in point.get("success_by_family", {}).items():
        out[f"eval/success/{family}"] = rate
    for key in (
        "repeated_call_rate",
        "format_error_rate",
        "decomposition_accuracy",
        "planned_rate",
        "first_tool_rate",
    ):
        if key in point:
            out[f"eval/{key}"] = point[key]
    if "general_accuracy" in point:
        out["eval/general_accuracy"] = point["general_accuracy"]
    if "program" in point:
        out["eval/program_success_rate"] = point["program"]["success_rate"]
    return out


def general_figures(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The general-capability check's accuracy before and after RL and its drop (None where
    it did not run)."""
    b = before.get("general", {}).get("accuracy")
    a = after.get("general", {}).get("accuracy")
    drop = round(b - a, 6) if a is not None and b is not None else None
    return {"general_before": b, "general_after": a, "general_drop": drop}


def write_records(path: Path, records: list[dict[str, Any]]) -> None:
    """Append ``records`` to a JSON-lines file."""
    sink = JsonlSink(path)
    for r in records:
        sink.write(r)
    sink.close()


def progress_bar(console: Console, enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
        disable=not enabled,
        transient=False,
    )
