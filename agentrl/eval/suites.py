"""Named evaluation suites: ``basic`` (monitor ability), ``hard`` (push the boundary),
``adversarial`` (find loopholes). Fixed seeds, greedy decoding; one report per suite with the
success rate per task, plus per-episode transcripts.

Seeds: episode ``i`` of a task in suite ``s`` uses seed ``seed0 + SEED_OFFSET[s] + i`` and
level ``levels[i % len(levels)]``, so every policy sees the same episodes.

A task whose optional extra is not installed (math: reasoning-gym) is not run: the suite's
summary lists it under ``skipped`` with the ``pip install`` that adds it, and ``agentrl eval``
prints it. Reporting beats refusing here: the rest of the suite still measures the policy on a
default install, and the report says which tasks its rate leaves out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl.envs import make
from agentrl.envs.tasks.meeting import MeetingFamily
from agentrl.envs.tasks.shaped import ShapedTaskEnv
from agentrl.envs.tasks.shop import ShopFamily
from agentrl.envs.tasks.weather import WeatherFamily
from agentrl.eval import adversarial as adv
from agentrl.eval.policies import TextPolicy, run_text_episode

SUITES: tuple[str, ...] = ("basic", "hard", "adversarial")
SEED_OFFSET = {"basic": 0, "hard": 1_000, "adversarial": 2_000}


@dataclass(frozen=True)
class SuiteTask:
    """One task of a suite: a report key, a zero-argument env factory and its levels."""

    key: str
    make_env: Callable[[], Any]
    levels: tuple[int, ...]
    missing: str = ""  # why it cannot run here (an optional extra not installed); "" = it can


def _registered(env_id: str, levels: tuple[int, ...], **kwargs: Any) -> SuiteTask:
    key = env_id if not kwargs.get("split") else f"{env_id}_{kwargs['split']}"
    return SuiteTask(key, lambda: make(env_id, **kwargs), levels)


def _wrapped(key: str, build: Callable[[], Any], levels: tuple[int, ...], turns: int = 6):
    return SuiteTask(key, lambda: ShapedTaskEnv(build(), max_turns=turns), levels)


def _optional(env_id: str, levels: tuple[int, ...]) -> SuiteTask:
    """A task that needs an optional extra; ``missing`` holds the env's ImportError (it names
    the ``pip install``) when the extra is absent."""
    try:
        make(env_id)
    except ImportError as err:
        return SuiteTask(env_id, lambda: make(env_id), levels, missing=str(err))
    return _registered(env_id, levels)


def suite_tasks(name: str) -> list[SuiteTask]:
    """The tasks of suite ``name``; math is ``missing`` where reasoning-gym is not installed."""
    if name == "basic":
        tasks = [
            _registered("weather", (1,)),
            _registered("meeting", (1,)),
            _registered("shop", (1,)),
            _optional("math", (1,)),
            _registered("dynamic", (1,), split="heldout"),
        ]
    elif name == "hard":
        tasks = [
            _registered("weather", (3,)),
            _registered("meeting", (2, 3)),
            _registered("shop", (2, 3)),
            _optional("math", (2, 3)),
            _registered("library", (2, 3)),
            _registered("dynamic", (2, 3), split="heldout"),
        ]
    elif name == "adversarial":
        tasks = [
            _wrapped("injection/weather", lambda: adv.InjectedResults(WeatherFamily()), (1, 2)),
            _wrapped("injection/shop", lambda: adv.InjectedResults(ShopFamily()), (1,), 8),
            _wrapped("garbage/weather", lambda: adv.FlakyTools(WeatherFamily()), (1,)),
            _wrapped("timeout/shop", lambda: adv.FlakyTools(ShopFamily(), "timeout"), (0,)),
            _wrapped("timeout/meeting", lambda: adv.FlakyTools(MeetingFamily(), "timeout"), (0,)),
            _wrapped("decoy/weather", lambda: adv.DecoyTools(WeatherFamily()), (1, 2)),
            _wrapped("decoy/shop", lambda: adv.DecoyTools(ShopFamily()), (1,), 8),
            _wrapped("missing/weather",
                     lambda: adv.MissingTool(WeatherFamily(), "get_weather"), (1, 2)),
            _wrapped("missing/shop",
                     lambda: adv.MissingTool(ShopFamily(), "checkout", (1, 2, 3)), (1,)),
            _wrapped("unservable", lambda: adv.Unservable(WeatherFamily()), (1,)),
        ]  # fmt: skip
    else:
        raise ValueError(f"unknown suite {name!r}; known: {', '.join(SUITES)}")
    return tasks


def summarize_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Success rate (overall and per level), terminations, mean reward of episode records."""
    n = max(len(records), 1)
    by_level: dict[int, list[bool]] = defaultdict(list)
    for r in records:
        by_level[r["level"]].append(r["success"])
    return {
        "episodes": len(records),
        "success_rate": sum(r["success"] for r in records) / n,
        "success_by_level": {str(k): sum(v) / len(v) for k, v in sorted(by_level.items())},
        "terminations": dict(Counter(r["termination"] for r in records)),
        "mean_reward": sum(r["reward"]["total"] for r in records) / n,
    }


def _run_task_text(policy: TextPolicy, task: SuiteTask, seeds: list[int]) -> list[dict]:
    env = task.make_env()
    return [
        run_text_episode(policy, env, s, task.levels[i % len(task.levels)])
        for i, s in enumerate(seeds)
    ]


def _run_task_model(generator: Any, task: SuiteTask, seeds: list[int], **gen: Any) -> list[dict]:
    from agentrl.rollout import EpisodeSpec, run_episodes

    specs = [
        EpisodeSpec(seed=s, level=task.levels[i % len(task.levels)], group_id=i)
        for i, s in enumerate(seeds)
    ]
    trajs = run_episodes(generator, task.make_env, specs, greedy=True, **gen)
    return [{**t.to_record(), "seed": t.info.get("seed")} for t in trajs]


def run_suite(
    name: str,
    *,
    policy: TextPolicy | None = None,
    generator: Any = None,
    episodes: int = 8,
    seed0: int = 10_000,
    max_new_tokens: int = 128,
    max_total_tokens: int = 2048,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run one suite with a text ``policy`` or an HF ``generator``; (summary, records).

    ``summary["skipped"]``: task key -> why it did not run (a missing optional extra).
    """
    if (policy is None) == (generator is None):
        raise ValueError("run_suite needs exactly one of policy= or generator=")
    summary: dict[str, Any] = {"tasks": {}, "skipped": {}}
    records: list[dict[str, Any]] = []
    for task in suite_tasks(name):
        if task.missing:
            summary["skipped"][task.key] = task.missing
            continue
        seeds = [seed0 + SEED_OFFSET[name] + i for i in range(episodes)]
        if policy is not None:
            recs = _run_task_text(policy, task, seeds)
        else:
            recs = _run_task_model(generator, task, seeds, max_new_tokens=max_new_tokens,
                                   max_total_tokens=max_total_tokens)  # fmt: skip
        for r in recs:
            r["suite"], r["task"] = name, task.key
        summary["tasks"][task.key] = summarize_records(recs)
        records += recs
    overall = summarize_records(records)
    summary.update(episodes=overall["episodes"], success_rate=overall["success_rate"],
                   mean_reward=overall["mean_reward"])  # fmt: skip
    return summary, records
