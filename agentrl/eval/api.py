"""Evaluate a saved model or run directory on a registered task (``agentrl eval``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.chat.render import stop_token_ids
from agentrl.envs import make
from agentrl.envs.plugins import import_env_modules
from agentrl.eval.runner import evaluate
from agentrl.policy.generate import HFGenerator
from agentrl.policy.loading import load_policy


def resolve_model_path(model_or_run_dir: str) -> str:
    """A run directory means its ``model/`` folder; anything else is a path or hub id."""
    p = Path(model_or_run_dir)
    looks_like_path = (
        model_or_run_dir.startswith(("/", ".", "~")) or model_or_run_dir.count("/") > 1
    )
    if looks_like_path and not p.exists():
        raise FileNotFoundError(
            f"{model_or_run_dir!r} does not exist (expected a run directory, "
            "a saved model, a hub id like 'org/name', or 'agentrl/tiny')"
        )
    if (p / "model" / "config.json").is_file():
        return str(p / "model")
    if p.exists() and not (p / "config.json").is_file():
        raise FileNotFoundError(
            f"{model_or_run_dir!r} is neither a run directory (with model/) nor a saved model "
            "(with config.json)"
        )
    return model_or_run_dir


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
) -> tuple[dict[str, Any], list]:
    """Greedy evaluation on held-out seeds; returns (report, trajectories)."""
    import_env_modules(imports or [])
    model, tok = load_policy(resolve_model_path(model_or_run_dir), device=device)
    generator = HFGenerator(model, tok, stop_token_ids(tok), tok.pad_token_id)
    make(task, max_turns=max_turns)  # an unknown task fails here with the list of known ones

    def make_env():
        return make(task, max_turns=max_turns)

    levels = levels or [1, 2, 3]
    report, trajs = evaluate(
        generator,
        make_env,
        episodes=episodes,
        levels=levels,
        seed0=seed0,
        max_new_tokens=max_new_tokens,
        max_total_tokens=max_total_tokens,
    )
    report = {"model": model_or_run_dir, "task": task, **report}
    return report, trajs
