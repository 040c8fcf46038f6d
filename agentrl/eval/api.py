"""``agentrl eval``: a model, a run directory, the reference solver or an OpenAI-compatible
endpoint, on one registered task or on the named suites (basic, hard, adversarial)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentrl.envs import make
from agentrl.envs.plugins import import_env_modules
from agentrl.eval.general import general_check
from agentrl.eval.policies import OpenAIPolicy, ReferencePolicy, TextPolicy, run_text_episode
from agentrl.eval.runner import behaviour_lines, eval_specs, evaluate, success_line, summarize
from agentrl.eval.suites import SUITES, run_suite, summarize_records
from agentrl.eval.weights import load_eval_engine


def run_settings(policy: str) -> dict[str, Any]:
    """The task settings a run directory was trained with (its ``config.yaml``), as
    ``run_eval`` keyword defaults; {} for anything that is not a run directory."""
    path = Path(policy) / "config.yaml"
    if not path.is_file():
        return {}
    from agentrl.config import load_config

    cfg = load_config(path)
    wrapper = {"last_actions": cfg.task.last_actions} if cfg.task.last_actions else {}
    if cfg.rollout.mode == "plan_execute":
        wrapper["plan_execute"] = True
    return {
        "task": cfg.task.env,
        "levels": list(cfg.task.levels),
        "max_turns": cfg.task.max_turns,
        # the wrapper is an env option here: make(task, last_actions=k, ...)
        "env_kwargs": {**cfg.task.env_kwargs, **wrapper},
        "imports": list(cfg.task.imports),
        "max_new_tokens": cfg.rollout.max_new_tokens,
        "max_total_tokens": cfg.rollout.max_total_tokens,
        "constrained": cfg.rollout.constrained,
        # a run trained with hierarchical memory is evaluated with the same memory
        **({"memory": cfg.rollout.memory} if cfg.rollout.memory.enabled else {}),
        # manager / worker episodes, as trained
        **({"hierarchy": cfg.rollout.hierarchy} if cfg.rollout.mode == "hierarchical" else {}),
    }


def evaluate_model(
    model_or_run_dir: str,
    *,
    task: str = "weather",
    episodes: int = 96,
    levels: list[int] | None = None,
    seed0: int = 10_000,
    max_turns: int = 6,
    max_new_tokens: int = 96,
    max_total_tokens: int = 1024,
    device: str = "cpu",
    imports: list[str] | None = None,
    general: bool = False,
    env_kwargs: dict[str, Any] | None = None,
    weights: str = "final",
    search: int = 1,
    depth: int = 1,
    value: str = "layers",
    memory: Any = None,
    constrained: str = "off",
    hierarchy: Any = None,
) -> tuple[dict[str, Any], list]:
    """Greedy evaluation on held-out seeds; returns (report, trajectories). ``general``: also
    the general-capability check (``report["general"]``). ``env_kwargs`` go to ``make``.
    ``weights="start"``: a run directory's weights when RL began (after its warm start).
    ``search`` > 1: tree search with K = ``search`` candidates per turn, each played
    ``depth`` turns (``agentrl.planning.search``); ``report["search"]`` holds its cost.
    ``value="critic"``: branches still running are scored by the PPO run's critic.
    ``memory``: a run's ``rollout.memory`` (episodes played with hierarchical memory).
    ``constrained="tool_calls"``: grammar-constrained tool calls (``agentrl.engine.grammar``).
    ``hierarchy``: a run's ``rollout.hierarchy`` (manager / worker episodes)."""
    _check_decoding(search, depth, value, memory, constrained, hierarchy)
    import_env_modules(imports or [])
    kwargs = dict(env_kwargs or {})
    # an unknown task (the list of known ones) or a missing extra fails before the model loads
    check_env_kwargs(task, max_turns, kwargs)
    generator = load_eval_engine(model_or_run_dir, device, weights)

    def make_env():
        return make(task, max_turns=max_turns, **kwargs)

    levels = levels or [1, 2, 3]
    extra: dict[str, Any] = {}
    if search > 1:
        from rich.console import Console
        from rich.progress import Progress

        from agentrl.planning import search_episodes
        from agentrl.planning.value import critic_scorer

        scorer = critic_scorer(model_or_run_dir, generator.model) if value == "critic" else None
        with Progress(console=Console(stderr=True), transient=True) as bar:
            task_bar = bar.add_task(f"tree search K={search} depth={depth}", total=episodes)
            trajs, cost = search_episodes(
                generator, make_env, eval_specs(episodes, levels, seed0), k=search, depth=depth,
                max_new_tokens=max_new_tokens, max_total_tokens=max_total_tokens, scorer=scorer,
                on_episode=lambda n, _total: bar.update(task_bar, completed=n),
            )  # fmt: skip
        report = summarize(trajs)
        extra["search"] = {"k": search, "depth": depth, "value": value, **cost.as_dict()}
    else:
        report, trajs = evaluate(
            generator,
            make_env,
            episodes=episodes,
            levels=levels,
            seed0=seed0,
            max_new_tokens=max_new_tokens,
            max_total_tokens=max_total_tokens,
            memory=memory,
            constrained=constrained,
            hierarchy=hierarchy,
            on_episode=stderr_progress(episodes),
        )
        extra["constrained"] = constrained
    report = {"model": model_or_run_dir, "weights": weights, "task": task, **report, **extra}
    if general:
        report["general"] = general_check(generator, generator.tokenizer)
    return report, trajs


def stderr_progress(episodes: int):
    """``on_episode`` that prints "evaluating: n/N episodes, S s" to stderr on about every
    tenth finished episode: a long evaluation shows it moves, in a log file too."""
    import sys

    from agentrl.sft import plain_progress

    def emit(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    advance = plain_progress(episodes, unit="episodes", emit=emit)
    return lambda _finished, _total: advance("evaluating")


def _check_decoding(search: int, depth: int, value: str, memory: Any, constrained: str,
                    hierarchy: Any = None) -> None:  # fmt: skip
    """The decoding options of ``evaluate_model`` make sense together (else a ValueError)."""
    if hierarchy is not None and search > 1:
        raise ValueError("--search plays ReAct episodes: not for a run trained with "
                         "rollout.mode=hierarchical")  # fmt: skip
    if search < 1 or depth < 1:
        raise ValueError(f"--search and --depth must be >= 1, got {search} and {depth}")
    if value not in ("layers", "critic"):
        raise ValueError(f"--value must be 'layers' or 'critic', got {value!r}")
    if search > 1 and memory is not None and memory.enabled:
        raise ValueError("--search plays whole histories: not for a run trained with "
                         "rollout.memory")  # fmt: skip
    if search > 1 and constrained != "off":
        raise ValueError("--search does not constrain its branches: use --constrained off")


def parse_env_options(options: list[str]) -> dict[str, Any]:
    """``--env KEY=VALUE`` options as keyword arguments for ``make`` (each VALUE parsed as
    YAML); a malformed option is a ValueError naming it."""
    import yaml

    kwargs = {}
    for opt in options:
        key, sep, raw = opt.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--env expects KEY=VALUE, got {opt!r}")
        try:
            kwargs[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise ValueError(f"--env {key.strip()}: VALUE is not valid YAML ({err})") from err
    return kwargs


def check_env_kwargs(task: str, max_turns: int, kwargs: dict[str, Any]) -> Any:
    """``make(task, ...)``, with a keyword the task does not take as a ValueError naming it."""
    try:
        return make(task, max_turns=max_turns, **kwargs)
    except TypeError as err:
        raise ValueError(f"task {task!r} rejected its options {sorted(kwargs)}: {err}") from err


def load_text_policy(spec: str, seed: int = 0) -> TextPolicy | None:
    """``reference`` or ``openai:BASE_URL:MODEL`` as a text policy; None for a model path."""
    if spec == "reference":
        return ReferencePolicy()
    if spec.startswith("openai:"):
        return OpenAIPolicy.from_spec(spec, seed=seed)
    return None


def evaluate_text_task(
    policy: TextPolicy,
    *,
    task: str = "weather",
    episodes: int = 96,
    levels: list[int] | None = None,
    seed0: int = 10_000,
    max_turns: int = 6,
    imports: list[str] | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``evaluate_model``'s counterpart for text policies (reference, OpenAI endpoints)."""
    import_env_modules(imports or [])
    env = check_env_kwargs(task, max_turns, env_kwargs or {})
    levels = levels or [1, 2, 3]
    records = [
        run_text_episode(policy, env, seed0 + i, levels[i % len(levels)]) for i in range(episodes)
    ]
    report = {"model": policy.name, "task": task, **summarize_records(records)}
    return report, records


def evaluate_suites(
    policy_spec: str,
    suites: list[str],
    *,
    episodes: int = 8,
    seed0: int = 10_000,
    device: str = "cpu",
    max_new_tokens: int = 128,
    max_total_tokens: int = 2048,
    weights: str = "final",
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run named suites (``basic``, ``hard``, ``adversarial``) with greedy decoding;
    ``weights="start"``: a run directory's weights when RL began.

    Returns the report (``success_rate`` overall, per suite and per task under
    ``suites[name]["tasks"]``) and every episode record (the transcripts)."""
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite(s) {unknown}; known: {', '.join(SUITES)}")
    text = load_text_policy(policy_spec, seed=seed0)
    if text is not None and weights != "final":
        raise ValueError("--weights start is for a run directory, not a text policy")
    generator = None if text is not None else load_eval_engine(policy_spec, device, weights)
    report: dict[str, Any] = {"policy": policy_spec, "weights": weights, "decoding": "greedy",
                              "seed0": seed0, "episodes_per_task": episodes,
                              "suites": {}}  # fmt: skip
    records: list[dict[str, Any]] = []
    for name in suites:
        summary, recs = run_suite(
            name, policy=text, generator=generator, episodes=episodes, seed0=seed0,
            max_new_tokens=max_new_tokens, max_total_tokens=max_total_tokens,
        )  # fmt: skip
        report["suites"][name] = summary
        records += recs
    report["episodes"] = len(records)
    report["success_rate"] = sum(r["success"] for r in records) / max(len(records), 1)
    return report, records


def run_eval(
    policy: str,
    *,
    task: str | None = None,
    levels: list[int] | None = None,
    suites: list[str] | tuple[str, ...] = (),
    episodes: int | None = None,
    seed0: int = 10_000,
    imports: list[str] | tuple[str, ...] = (),
    general: bool = False,
    max_turns: int | None = None,
    max_new_tokens: int | None = None,
    max_total_tokens: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    weights: str = "final",
    search: int = 1,
    depth: int = 1,
    value: str = "layers",
    constrained: str | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What ``agentrl eval`` runs: the named ``suites`` (``all``: every one, 8 episodes per
    task by default), else 96 episodes of ``task`` with a model or a text policy. ``general``:
    a model's general-capability check too (``agentrl.eval.general``).

    A run directory's own task settings (``run_settings``) are the defaults of every task
    argument left None; without one: weather, levels 1-3, 6 turns, 96 / 1,024 tokens.
    ``env_kwargs`` update the run's ``task.env_kwargs``. ``constrained``: ``off`` or
    ``tool_calls`` (None: the run's ``rollout.constrained``, else off).

    Returns (report, episode records).
    """
    if suites and (search > 1 or depth > 1 or constrained):
        raise ValueError("--search, --depth and --constrained are for one task, not --suite")
    if suites:
        names = list(SUITES) if "all" in suites else list(suites)
        return evaluate_suites(policy, names, episodes=episodes or 8, seed0=seed0,
                               weights=weights)  # fmt: skip
    base = {"task": "weather", "levels": [1, 2, 3], "max_turns": 6, "env_kwargs": {},
            "imports": [], "max_new_tokens": 96, "max_total_tokens": 1024,
            "constrained": "off"}  # fmt: skip
    own = run_settings(policy)
    if task is None or task == own.get("task"):
        base.update(own)
    given = {"task": task, "levels": levels, "max_turns": max_turns,
             "max_new_tokens": max_new_tokens, "max_total_tokens": max_total_tokens,
             "constrained": constrained}  # fmt: skip
    opts = {**base, **{k: v for k, v in given.items() if v is not None}}
    opts["env_kwargs"] = {**base["env_kwargs"], **(env_kwargs or {})}
    opts["imports"] = [*base["imports"], *imports]
    text = load_text_policy(policy, seed0)
    if (search > 1 or depth > 1) and text is not None:
        raise ValueError("--search and --depth need a model (a run directory or model path)")
    if general and (suites or text is not None):
        raise ValueError(
            "--general checks a model (a run directory, a model path or id), without --suite"
        )
    if text is not None and opts["constrained"] != "off":
        raise ValueError("--constrained masks a model's logits: not for a text policy")
    if text is not None and weights != "final":
        raise ValueError("--weights start is for a run directory, not a text policy")
    if text is not None:
        return evaluate_text_task(text, task=opts["task"], episodes=episodes or 96,
                                  levels=opts["levels"], seed0=seed0, imports=opts["imports"],
                                  max_turns=opts["max_turns"],
                                  env_kwargs=opts["env_kwargs"])  # fmt: skip
    report, trajs = evaluate_model(policy, episodes=episodes or 96, seed0=seed0, general=general,
                                   weights=weights, search=search, depth=depth,
                                   value=value, **opts)  # fmt: skip
    return report, [t.to_record() for t in trajs]


def write_outputs(out: Path, report: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """``out/report.json`` and the per-episode transcripts (``transcripts.jsonl``, or one
    ``transcripts/<suite>.jsonl`` per suite)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(r.get("suite", ""), []).append(r)
    for suite, recs in groups.items():
        path = out / "transcripts" / f"{suite}.jsonl" if suite else out / "transcripts.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as fh:
            for r in recs:
                fh.write(json.dumps(r, default=str, ensure_ascii=False) + "\n")


def report_lines(report: dict[str, Any]) -> list[str]:
    """Human-readable summary lines of a report."""
    if "suites" not in report:
        lines = [success_line(report)]
        lines += behaviour_lines(report)
        if "search" in report:
            c = report["search"]
            lines.append(f"tree search K={c['k']} depth={c['depth']}: {c['branches']} branches, "
                         f"{c['episode_tokens']} + {c['branch_tokens']} tokens (episodes + "
                         f"branches), {c['seconds']:.1f} s")  # fmt: skip
        if "general" in report:
            g = report["general"]
            kinds = "  ".join(f"{k} {v:.2f}" for k, v in g["by_kind"].items())
            lines.append(f"general capability: {g['accuracy']:.3f} ({g['questions']} "
                         f"questions, no tools)  {kinds}")  # fmt: skip
        return lines
    lines = []
    for name, s in report["suites"].items():
        tasks = "  ".join(f"{k} {v['success_rate']:.2f}" for k, v in s["tasks"].items())
        lines.append(f"{name}: {s['success_rate']:.3f} ({s['episodes']} episodes)  {tasks}")
        lines += [f"{name}: SKIPPED {k}: {why}" for k, why in s.get("skipped", {}).items()]
    return lines
