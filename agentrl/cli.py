"""The ``agentrl`` command line. Each subcommand calls one library function."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

app = typer.Typer(
    help="agentrl: train tool-using LLM agents with reinforcement learning (GRPO).",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(stderr=True)


def _fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


def _emit(summary: dict, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
    sys.stdout.flush()


@app.command()
def demo(
    steps: int = typer.Option(None, help="RL steps (default: the demo preset's)."),
    run_dir: str = typer.Option("runs/demo", help="Where the run is written."),
    seed: int = typer.Option(0, help="Seed of everything (fixed seed = reproducible figures)."),
    as_json: bool = typer.Option(
        False, "--json", help="Print a JSON summary as the last stdout line."
    ),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Build (or reuse) the tiny local model, warm-start it on reference demonstrations, train it
    with GRPO on the weather task and report held-out success before and after RL."""
    from agentrl.config import ConfigError, build_config
    from agentrl.trainer import train

    overrides = [f"train.run_dir={run_dir}", f"train.seed={seed}"]
    if steps is not None:
        overrides.append(f"train.steps={steps}")
    try:
        cfg = build_config({}, overrides)
    except ConfigError as err:
        _fail(str(err))
    summary = train(cfg, progress=not quiet, console=console)
    _report(summary)
    _emit(summary, as_json)


@app.command("train")
def train_cmd(
    config: Path = typer.Argument(
        ..., help="YAML config file (sections: model, task, reward, rollout, algo, train)."
    ),
    set_: list[str] = typer.Option(
        [], "--set", help="Override one field: --set algo.lr=1e-5 (repeatable)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print a JSON summary as the last stdout line."
    ),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Run the training loop from a config file."""
    from agentrl.config import ConfigError, load_config
    from agentrl.trainer import train

    try:
        cfg = load_config(config, set_)
    except ConfigError as err:
        _fail(str(err))
    summary = train(cfg, progress=not quiet, console=console)
    _report(summary)
    _emit(summary, as_json)


@app.command("eval")
def eval_cmd(
    model: str = typer.Argument(
        ..., help="Run directory, saved model path, HF hub id, or 'agentrl/tiny'."
    ),
    task: str = typer.Option("weather", help="Registered environment id."),
    episodes: int = typer.Option(96, help="Held-out evaluation episodes."),
    levels: str = typer.Option("1,2,3", help="Comma-separated difficulty levels (cycled)."),
    seed: int = typer.Option(10_000, help="First held-out seed."),
    out: Path = typer.Option(
        None, help="Write the report JSON and transcripts into this directory."
    ),
    imports: list[str] = typer.Option(
        [], "--import", help="Module or .py file that registers the task (repeatable)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as the last stdout line."),
) -> None:
    """Evaluate a model alone with greedy decoding on fixed held-out seeds."""
    from agentrl.eval.api import evaluate_model

    try:
        level_list = [int(x) for x in levels.split(",") if x.strip()]
    except ValueError:
        _fail(f"--levels must be comma-separated integers, got {levels!r}")
    try:
        report, trajs = evaluate_model(
            model, task=task, episodes=episodes, levels=level_list, seed0=seed, imports=imports
        )
    except (OSError, ModuleNotFoundError, KeyError, ValueError) as err:
        _fail(str(err))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=2))
        with (out / "transcripts.jsonl").open("w") as fh:
            for t in trajs:
                fh.write(json.dumps(t.to_record()) + "\n")
    console.print(
        f"success rate: {report['success_rate']:.3f}  by level: {report['success_by_level']}"
    )
    _emit(report, as_json)


@app.command()
def envs() -> None:
    """List registered environments."""
    from agentrl.envs import list_envs

    for name in list_envs():
        typer.echo(name)


def _report(summary: dict) -> None:
    before, after = summary.get("success_before"), summary.get("success_after")
    if before is not None and after is not None:
        console.print(
            f"[bold]held-out success: {before:.3f} -> {after:.3f}[/] "
            f"({summary['episodes']} episodes) run_dir={summary['run_dir']}"
        )


if __name__ == "__main__":
    app()
