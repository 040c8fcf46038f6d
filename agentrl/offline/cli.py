"""``agentrl offline`` and ``agentrl export-data`` (registered by ``agentrl.cli``)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

console = Console(stderr=True)


def _fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(2)


def offline_cmd(
    run_dirs: list[Path] = typer.Argument(
        ..., help="Run directories (their trajectories.jsonl) or episode JSONL files."
    ),
    algo: str = typer.Option(..., "--algo", help="dpo (preference pairs) or iql (Q, V, AWR)."),
    out: Path = typer.Option(..., "--out", help="The output run directory."),
    config: Path = typer.Option(
        None,
        "--config",
        help="Config file (default: the first run's config.yaml, from its final model/).",
    ),
    set_: list[str] = typer.Option([], "--set", help="Override one field (repeatable)."),
    epochs: int = typer.Option(1, min=1, help="Passes over the logged data."),
    batch_size: int = typer.Option(
        8, min=1, help="Pairs (dpo) or episodes (iql) per optimizer step."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as the last line."),
) -> None:
    """Train a policy from logged episodes (DPO or IQL) and evaluate it on the held-out
    episodes as `agentrl train` does; OUT is a run directory."""
    from agentrl.config import ConfigError
    from agentrl.offline.logs import LogError
    from agentrl.offline.train import offline_config, offline_train

    try:
        cfg = offline_config([str(p) for p in run_dirs], out, config, set_)
        summary = offline_train(cfg, run_dirs, algo, epochs=epochs, batch_size=batch_size,
                                console=console)  # fmt: skip
    except (ConfigError, LogError, FileNotFoundError, ValueError, ImportError) as err:
        _fail(str(err))
    before, after = summary.get("success_before"), summary.get("success_after")
    if before is not None and after is not None:
        console.print(f"[bold]held-out success: {before:.3f} -> {after:.3f}[/] "
                      f"({summary['episodes']} episodes) out={escape(str(out))}")  # fmt: skip
    if as_json:
        print(json.dumps(summary))


def export_data_cmd(
    run_dirs: list[Path] = typer.Argument(
        ..., help="Run directories (their trajectories.jsonl) or episode JSONL files."
    ),
    fmt: str = typer.Option(
        ...,
        "--format",
        help="sft (successful episodes' messages) or dpo (prompt/chosen/"
        "rejected pairs of one task instance).",
    ),
    out: Path = typer.Option(..., "--out", help="Directory for Dataset.save_to_disk."),
    min_gap: float = typer.Option(
        0.0, "--min-gap", min=0, help="dpo: a pair's rewards differ by more than this."
    ),
    force: bool = typer.Option(False, help="Replace --out if it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as the last line."),
) -> None:
    """Export logged episodes as a Hugging Face datasets dataset in TRL's conversational
    format (datasets.load_from_disk reads it)."""
    from agentrl.offline.dataset import export_dataset
    from agentrl.offline.logs import LogError

    try:
        manifest = export_dataset(run_dirs, fmt, out, min_gap=min_gap, force=force)
    except (LogError, FileExistsError, ValueError, ImportError) as err:
        _fail(str(err))
    console.print(f"agentrl export-data: {manifest['rows']} {fmt} rows from "
                  f"{manifest['episodes']} episodes in {escape(str(out))}")  # fmt: skip
    if as_json:
        print(json.dumps(manifest))
