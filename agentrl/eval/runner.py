"""Evaluate a policy on held-out episodes: greedy decoding, fixed seeds, success per level."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from agentrl.engine.decoder import Engine
from agentrl.eval.task_ids import task_family
from agentrl.monitor.episode_checks import first_repeat
from agentrl.rollout import EpisodeSpec, run_episodes
from agentrl.types import Trajectory


def eval_specs(episodes: int, levels: list[int], seed0: int) -> list[EpisodeSpec]:
    """Held-out episodes: seeds seed0, seed0+1, ...; levels cycled so each gets an equal share."""
    return [
        EpisodeSpec(seed=seed0 + i, level=levels[i % len(levels)], group_id=i)
        for i in range(episodes)
    ]


def summarize(trajs: list[Trajectory]) -> dict[str, Any]:
    """Success rate overall and per level, termination reasons, mean reward and calls,
    ``repeated_call_rate``: the share of episodes that repeat a call which had already
    succeeded (same name and arguments; a retry after an error is not a repeat),
    ``format_error_rate``: malformed tool calls (parse errors) per assistant turn, and for
    plan-and-execute episodes ``decomposition_accuracy`` and ``planned_rate``; where the
    episodes come from several task families (the library, a staged curriculum's mix)
    ``success_by_family`` too."""
    by_level: dict[int, list[bool]] = defaultdict(list)
    by_family: dict[str | None, list[bool]] = defaultdict(list)
    for t in trajs:
        by_level[t.level].append(t.success)
        by_family[task_family(t.task_id)].append(t.success)
    n = max(len(trajs), 1)
    families = (
        {"success_by_family": {k: sum(v) / len(v) for k, v in sorted(by_family.items())}}
        if len(by_family) > 1 and None not in by_family
        else {}
    )
    return {
        "episodes": len(trajs),
        "success_rate": sum(t.success for t in trajs) / n,
        "success_by_level": {str(k): sum(v) / len(v) for k, v in sorted(by_level.items())},
        **families,
        "terminations": dict(Counter(t.termination for t in trajs)),
        "mean_reward": sum(t.reward.total for t in trajs) / n,
        "mean_tool_calls": sum(len(t.tool_calls) for t in trajs) / n,
        "mean_turns": sum(t.info.get("turns", 0) for t in trajs) / n,
        "repeated_call_rate": sum(
            first_repeat({"tool_calls": t.tool_calls}) is not None for t in trajs
        )
        / n,
        "format_error_rate": sum(len(t.info.get("parse_errors", [])) for t in trajs)
        / max(sum(t.info.get("turns", 0) for t in trajs), 1),
        **_decomposition(trajs),
    }


def success_line(summary: dict[str, Any]) -> str:
    """``success rate: 0.396  by level: {...}``, and ``by family: {...}`` where there is one."""
    line = f"success rate: {summary['success_rate']:.3f}  by level: {summary['success_by_level']}"
    families = family_line(summary)
    return f"{line}  {families}" if families else line


def family_line(summary: dict[str, Any]) -> str:
    """``by family: {'math': 0.462, ...}`` (rates to 3 places), or "" for one family."""
    if "success_by_family" not in summary:
        return ""
    return f"by family: { {k: round(v, 3) for k, v in summary['success_by_family'].items()} }"


def behaviour_lines(summary: dict[str, Any]) -> list[str]:
    """How the episodes went beyond success: decomposition, first tool, repeats, format errors
    (one line), and whether the first call named the needed tool by level (another) and, for
    a mix of families, by family (a third)."""
    keys = ("call_decomposition_accuracy", "decomposition_accuracy", "first_tool_rate",
            "repeated_call_rate", "format_error_rate")  # fmt: skip
    steps = [f"{k.replace('_', ' ')} {summary[k]:.3f}" for k in keys if k in summary]
    lines = ["  ".join(steps)] if steps else []
    if "first_tool_by_level" in summary:
        by_level = {k: round(v, 3) for k, v in summary["first_tool_by_level"].items()}
        lines.append(f"first call names the needed tool, by level: {by_level}")
    if "first_tool_by_family" in summary:
        by_family = {k: round(v, 3) for k, v in summary["first_tool_by_family"].items()}
        lines.append(f"first call names the needed tool, by family: {by_family}")
    return lines


def _decomposition(trajs: list[Trajectory]) -> dict[str, float]:
    """Plan-and-execute episodes: mean decomposition accuracy of their plans (0 for an episode
    that wrote none), and the share of episodes that wrote one."""
    plans = [t.reward.layers["plan"] for t in trajs if "plan" in t.reward.layers]
    if not plans:
        return {}
    planned = sum(bool(t.info.get("plans")) for t in trajs) / len(trajs)
    return {"decomposition_accuracy": sum(plans) / len(plans), "planned_rate": planned}


def _offset(on_episode: Callable[[int, int], None] | None, start: int, total: int):
    """A batch's ``on_turn(finished, in_batch)`` as ``on_episode(start + finished, total)``
    (None without ``on_episode``)."""
    if on_episode is None:
        return None
    return lambda finished, _in_batch: on_episode(start + finished, total)


def evaluate(
    generator: Engine,
    make_env: Callable[[], object],
    *,
    episodes: int,
    levels: list[int],
    seed0: int,
    max_new_tokens: int = 96,
    max_total_tokens: int = 1024,
    batch_size: int = 64,
    memory: Any = None,
    constrained: str = "off",
    hierarchy: Any = None,
    on_episode: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, Any], list[Trajectory]]:
    """Greedy evaluation on ``episodes`` fixed held-out seeds; returns (summary, trajectories).
    The summary adds ``call_decomposition_accuracy`` (``agentrl.eval.decomposition``).
    ``memory``: ``rollout.memory``, to play the episodes with hierarchical memory.
    ``constrained``: ``rollout.constrained`` (grammar-constrained tool calls).
    ``hierarchy``: ``rollout.hierarchy``, to play manager / worker episodes
    (``rollout.mode: hierarchical``, ``agentrl.planning.hierarchy``).
    ``on_episode(finished, episodes)``: called as each episode ends (a progress line)."""
    from agentrl.eval.decomposition import call_decomposition

    if hierarchy is not None:
        from agentrl.planning.hier_rollout import run_hierarchical

        specs = eval_specs(episodes, levels, seed0)
        trajs = [t for k in range(0, len(specs), batch_size)
                 for t in run_hierarchical(generator, make_env, specs[k : k + batch_size],
                                           hierarchy, greedy=True, max_new_tokens=max_new_tokens,
                                           max_total_tokens=max_total_tokens,
                                           on_turn=_offset(on_episode, k, len(specs)))]  # fmt: skip
        return {**summarize(trajs), **call_decomposition(trajs, specs, make_env)}, trajs

    specs = eval_specs(episodes, levels, seed0)
    trajs: list[Trajectory] = []
    for start in range(0, len(specs), batch_size):
        trajs += run_episodes(
            generator,
            make_env,
            specs[start : start + batch_size],
            greedy=True,
            max_new_tokens=max_new_tokens,
            max_total_tokens=max_total_tokens,
            memory=memory,
            constrained=constrained,
            on_turn=_offset(on_episode, start, len(specs)),
        )
    return {**summarize(trajs), **call_decomposition(trajs, specs, make_env)}, trajs
