"""The one training loop: warm start -> evaluate -> (rollout -> reward -> advantage -> update
-> log) x steps -> evaluate -> save. Reads top to bottom."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from agentrl.algos.grpo import build_batch, episode_validity, reference_logprobs
from agentrl.algos.normalization import RewardNormalizer
from agentrl.algos.update import NanGuard, NonFiniteError, autocast_dtype
from agentrl.chat.render import stop_token_ids
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
from agentrl.curriculum import Assignment, Curriculum, family_levels
from agentrl.envs import make
from agentrl.envs.plugins import import_env_modules
from agentrl.envs.reference import run_reference_episode
from agentrl.eval.runner import evaluate
from agentrl.monitor.curves import EVAL_LOG
from agentrl.monitor.metrics import JsonlSink
from agentrl.monitor.step import step_metrics
from agentrl.policy.generate import HFGenerator
from agentrl.policy.loading import load_policy, save_policy
from agentrl.policy.lora import merge_and_save
from agentrl.rl_setup import (
    LoopState,
    RLModels,
    build_optimizer,
    build_rl_models,
    checkpoint_parts,
    episode_kl,
    make_kl_controller,
    resolve_truncation,
    restore_parts,
    set_lr,
    settings_at,
    update_policy,
)
from agentrl.rollout import EpisodeSpec, run_episodes
from agentrl.sft import sft_train
from agentrl.tools import runtime as tools_runtime
from agentrl.types import Trajectory


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def resolve_dtype(dtype: str, device: str) -> str:
    """fp32 on CPU (several times faster than bf16 without AVX-512), bf16 on CUDA."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if device.startswith("cuda") else "float32"


def env_factory(cfg: Config):
    """A function making a fresh environment for one episode: ``make_env()`` = ``task.env``,
    ``make_env(env_id)`` = another registered env (a staged curriculum's families).

    Applies ``cfg.tools`` (timeouts, breakers, workers, fallbacks) process-wide first, so every
    guard the environments build uses the run's settings. ``task.env_kwargs`` go to
    ``task.env`` only; every env gets the run's ``max_turns`` and reward weights.
    """
    import_env_modules(cfg.task.imports)
    tools_runtime.configure(cfg.tools)
    common = {"max_turns": cfg.task.max_turns, "reward_weights": cfg.reward.weights()}
    own = {**common, **cfg.task.env_kwargs}

    def make_env(env_id: str | None = None):
        if env_id is None or env_id == cfg.task.env:
            return make(cfg.task.env, **own)
        return make(env_id, **common)

    make_env()  # fail now, with the env's own message, if kwargs are wrong
    if cfg.curriculum.staged:
        for env_id in cfg.curriculum.env_ids():
            make_env(env_id)  # an unknown id fails here, naming the registered ones
    return make_env


def collect_demos(
    make_env, n: int, levels: list[int], seed0: int, env_ids: list[str] | None = None
) -> list[tuple[list, list]]:
    """``n`` reference-solver episodes as (messages, tool schemas) SFT examples.

    ``env_ids``: draw them from these envs in turn, each at its own levels (a staged
    curriculum's warm start covers every family); None = the run's env at ``levels``.
    """
    demos = []
    for i in range(n):
        if env_ids is None:
            env, level = make_env(), levels[i % len(levels)]
        else:
            env = make_env(env_ids[i % len(env_ids)])
            own = family_levels(env)
            level = own[(i // len(env_ids)) % len(own)]
        messages, _ = run_reference_episode(env, seed0 + i, level)
        demos.append((messages, env.tool_schemas))
    return demos


def sample_specs(
    rng: random.Random,
    groups: int,
    group_size: int,
    levels: list[int],
    seed_limit: int,
    first_group: int,
) -> list[EpisodeSpec]:
    """``groups`` task instances (training seeds stay below ``seed_limit``), each G times."""
    specs = []
    for g in range(groups):
        seed, level = rng.randrange(seed_limit), rng.choice(levels)
        specs += [EpisodeSpec(seed, level, first_group + g)] * group_size
    return specs


def make_curriculum(cfg: Config) -> Curriculum | None:
    """The run's curriculum when ``curriculum.enabled`` (else None).

    Default: dynamic difficulty inside ``cfg.task.env``: levels move by rolling success
    (``promote_above`` / ``demote_below`` over ``window`` episodes) within ``cfg.task.levels``.
    ``curriculum.staged``: the four stages of ``curriculum.stages`` (single tool -> fixed flows
    -> open library -> dynamic tools), every family with its own levels, earlier stages
    reviewed (``review_fraction``).
    """
    c = cfg.curriculum
    if not c.enabled:
        return None
    if c.staged:
        return Curriculum.from_config(c, seed=cfg.train.seed)
    return Curriculum.single(cfg.task.env, cfg.task.levels, promote_above=c.promote_above,
                             demote_below=c.demote_below, window=c.window,
                             level_review=c.level_review, seed=cfg.train.seed)  # fmt: skip


def curriculum_specs(
    cur: Curriculum,
    rng: random.Random,
    groups: int,
    group_size: int,
    seed_limit: int,
    first_group: int,
) -> tuple[list[EpisodeSpec], list[Assignment]]:
    """Like ``sample_specs`` but each group's env and level come from the curriculum."""
    assignments = cur.next_levels(groups)
    specs = []
    for g, a in enumerate(assignments):
        seed = rng.randrange(seed_limit)
        specs += [EpisodeSpec(seed, a.level, first_group + g, env_id=a.env_id)] * group_size
    return specs, assignments


def _progress(console: Console, enabled: bool) -> Progress:
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


def train(
    cfg: Config,
    *,
    progress: bool = True,
    console: Console | None = None,
    resume: bool = False,
    on_step: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Warm-start, evaluate, train with GRPO or PPO, evaluate again; returns the run summary.

    ``resume``: continue ``cfg.train.run_dir`` from its newest complete checkpoint (no warm
    start, no first evaluation: both happened before RL began). ``on_step(n)`` is called after
    each step (and its checkpoint) with the number of completed steps.
    """
    console = console or Console(stderr=True)
    t_start = time.time()
    run_dir = Path(cfg.train.run_dir)
    ckpt_dir = run_dir / "checkpoints"
    resume_from = latest_checkpoint(ckpt_dir) if resume else None
    if resume and resume_from is None:
        raise FileNotFoundError(f"--resume: no complete checkpoint in {ckpt_dir}")
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    seed_everything(cfg.train.seed)
    rng = random.Random(cfg.train.seed)
    device = resolve_device(cfg.model.device)
    model, tok = load_policy(
        cfg.model.name, dtype=resolve_dtype(cfg.model.dtype, device), device=device
    )
    generator = HFGenerator(model, tok, stop_token_ids(tok), tok.pad_token_id)
    make_env = env_factory(cfg)
    ro, algo = cfg.rollout, cfg.algo
    eval_kwargs = {
        "episodes": cfg.train.eval_episodes,
        "levels": cfg.train.eval_levels,
        "seed0": cfg.train.eval_seed,
        "max_new_tokens": ro.max_new_tokens,
        "max_total_tokens": ro.max_total_tokens,
    }

    # 1. Warm start: SFT on a few dozen reference demonstrations.
    if cfg.train.warmstart_demos > 0 and resume_from is None:
        demos = collect_demos(
            make_env,
            cfg.train.warmstart_demos,
            cfg.train.warmstart_levels,
            seed0=cfg.train.eval_seed // 2,
            env_ids=cfg.curriculum.env_ids() if cfg.curriculum.staged else None,
        )
        console.print(f"warm start: SFT on {len(demos)} reference demonstrations")
        sft_train(
            model,
            tok,
            demos,
            epochs=cfg.train.warmstart_epochs,
            lr=cfg.train.warmstart_lr,
            seed=cfg.train.seed,
            progress=progress,
            desc="warm start",
        )

    # 2. Baseline evaluation.
    before: dict[str, Any] = {}
    if cfg.train.eval_episodes and resume_from is None:
        console.print(f"evaluating before RL on {cfg.train.eval_episodes} held-out episodes")
        before, trajs = evaluate(generator, make_env, **eval_kwargs)
        _write_trajectories(run_dir / "eval_before.jsonl", trajs)
        console.print(
            f"success before RL: {before['success_rate']:.3f} {before['success_by_level']}"
        )
        (run_dir / EVAL_LOG).write_text(json.dumps(curve_point(0, 0, before)) + "\n")

    # 3. RL. The weights at RL start are the reference (and a LoRA run's frozen base).
    if resume_from is None:
        save_atomic(ckpt_dir / START_FILE, model.state_dict())
    else:
        model.load_state_dict(torch.load(ckpt_dir / START_FILE, map_location=device))
    rl = build_rl_models(model, cfg)
    model = generator.model = rl.policy
    optimizer = build_optimizer(rl, cfg)
    loop = LoopState(rng, make_kl_controller(cfg), RewardNormalizer(algo.reward_norm),
                     NanGuard(cfg.train.nan_patience), before, make_curriculum(cfg))  # fmt: skip
    logs = [run_dir / "metrics.jsonl", run_dir / "trajectories.jsonl", run_dir / EVAL_LOG]
    start = 0
    if resume_from is not None:
        start = restore_parts(load_checkpoint(resume_from), rl, optimizer, loop, run_dir)
        console.print(f"resumed from {resume_from} after {start} steps")
    truncation = resolve_truncation(cfg)
    amp = autocast_dtype(cfg.train.autocast, device)
    metrics, traj_sink, curve = JsonlSink(logs[0]), JsonlSink(logs[1]), JsonlSink(logs[2])
    per_step = ro.groups_per_step * ro.group_size  # episodes played per RL step

    def checkpoint(n: int) -> int:
        parts = checkpoint_parts(n, rl, optimizer, loop, logs)
        save_checkpoint(ckpt_dir, n, parts, cfg.train.keep_checkpoints)
        return n

    saved_at, interrupted = start, False
    with TermSignal() as term, _progress(console, progress) as bar:
        task = bar.add_task(algo.name.upper(), total=cfg.train.steps, completed=start, info="")
        for step in range(start, cfg.train.steps):
            t0 = time.time()
            s = settings_at(cfg, step, loop.kl)
            set_lr(optimizer, s.lr)
            first_group = step * ro.groups_per_step
            if loop.curriculum is None:
                specs = sample_specs(rng, ro.groups_per_step, ro.group_size, cfg.task.levels,
                                     cfg.train.eval_seed, first_group)  # fmt: skip
            else:
                specs, assigned = curriculum_specs(loop.curriculum, rng, ro.groups_per_step,
                                                   ro.group_size, cfg.train.eval_seed,
                                                   first_group)  # fmt: skip
            trajs = run_episodes(
                generator,
                make_env,
                specs,
                max_new_tokens=ro.max_new_tokens,
                max_total_tokens=ro.max_total_tokens,
                temperature=s.temperature,
                top_p=ro.top_p,
            )
            rollout_s = time.time() - t0
            valid = episode_validity(trajs, truncation)
            raw = torch.tensor([t.reward.total for t in trajs], dtype=torch.float32)  # (N,)
            rewards = loop.normalizer(raw, valid)  # (N,)
            batch = build_batch(trajs, torch.zeros(len(trajs)), valid, tok.pad_token_id)
            if rl.ref is not None:
                batch.ref_logp = reference_logprobs(rl.ref, batch, s.temperature)
            kl_per_episode = episode_kl(batch)  # (N,)
            stats, extra = update_policy(
                cfg, s, rl, optimizer, batch, trajs, rewards, valid, kl_per_episode, rng, amp
            )
            stepped = stats.pop("stepped")
            loop.kl.update(float(kl_per_episode[valid].mean()) if valid.any() else 0.0, len(trajs))
            m = step_metrics(step, trajs, valid, stats, rollout_s, time.time() - t0)
            m.update(extra)
            m.update({f"train/{k}": v for k, v in vars(s).items()})
            m["rollout/kl_per_episode"] = float(kl_per_episode.mean())
            if loop.curriculum is not None:  # one assignment per group of G episodes
                per_episode = [a for a in assigned for _ in range(ro.group_size)]
                counted = [t.termination != "harness_error" for t in trajs]  # faults never count
                outcomes = [t.success for t, c in zip(trajs, counted, strict=True) if c]
                scored = [a for a, c in zip(per_episode, counted, strict=True) if c]
                for event in loop.curriculum.update(scored, outcomes):
                    console.print(f"curriculum: {event}")
                m.update(loop.curriculum.metrics())
            metrics.write(m)
            for t in trajs:
                traj_sink.write({"step": step, **t.to_record()})
            if stats["skipped"]:
                console.print(f"[yellow]step {step}: {int(stats['skipped'])} update(s) skipped: "
                              "non-finite loss or gradient norm[/]")  # fmt: skip
            eval_every = cfg.train.eval_every
            if eval_every and (step + 1) % eval_every == 0 and step + 1 < cfg.train.steps:
                point, _ = evaluate(generator, make_env, **eval_kwargs)
                curve.write(curve_point(step + 1, (step + 1) * per_step, point))
                console.print(f"step {step + 1}: held-out success {point['success_rate']:.3f} "
                              f"{point['success_by_level']}")  # fmt: skip
            diverged = loop.guard.observe(stepped)
            every = cfg.train.checkpoint_every
            if diverged or term.requested or (every and (step + 1) % every == 0):
                saved_at = checkpoint(step + 1)
            if diverged:
                metrics.close()
                traj_sink.close()
                raise NonFiniteError(
                    f"{loop.guard.in_a_row} non-finite updates in a row (train.nan_patience="
                    f"{cfg.train.nan_patience}) at step {step}: the run stopped. The last good "
                    f"weights are checkpointed in {step_dir(ckpt_dir, saved_at)}. Lower algo.lr, "
                    "check the rewards for NaN/Inf, or set train.autocast=off."
                )
            bar.update(
                task,
                advance=1,
                info=f"success {m['rollout/success_rate']:.2f} "
                f"reward {m['reward/total']:.2f} kl {m.get('loss/kl', 0.0):.4f}",
            )
            if on_step is not None:
                on_step(step + 1)
            if term.requested:  # (it may have arrived after this step's checkpoint check)
                if saved_at < step + 1:
                    saved_at = checkpoint(step + 1)
                interrupted = True
                console.print(
                    f"SIGTERM: stopped after step {step + 1}, checkpoint in "
                    f"{step_dir(ckpt_dir, saved_at)}; continue with: "
                    f"agentrl train --resume {run_dir}"
                )
                break
    metrics.close()
    traj_sink.close()

    # 4. Final evaluation and save.
    after: dict[str, Any] = {}
    if cfg.train.eval_episodes and not interrupted:
        console.print(f"evaluating after RL on {cfg.train.eval_episodes} held-out episodes")
        after, trajs = evaluate(generator, make_env, **eval_kwargs)
        _write_trajectories(run_dir / "eval_after.jsonl", trajs)
        console.print(f"success after RL: {after['success_rate']:.3f} {after['success_by_level']}")
        curve.write(curve_point(cfg.train.steps, cfg.train.steps * per_step, after))
    curve.close()
    if cfg.train.save_model and not interrupted:
        _save_final(rl, tok, cfg, run_dir)
    before = loop.eval_before
    summary = {
        "success_before": before.get("success_rate"),
        "success_after": after.get("success_rate"),
        "episodes": cfg.train.eval_episodes,
        "eval_before": before,
        "eval_after": after,
        "steps": cfg.train.steps,
        "algo": algo.name,
        "interrupted": interrupted,
        "run_dir": str(run_dir),
        "wall_s": round(time.time() - t_start, 1),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def curve_point(step: int, episodes: int, summary: dict[str, Any]) -> dict[str, Any]:
    """A line of ``eval.jsonl``: held-out success after ``step`` RL steps, ``episodes`` played."""
    keep = ("success_rate", "success_by_level", "mean_tool_calls", "terminations")
    return {"step": step, "episodes": episodes, **{k: summary[k] for k in keep}}


def _save_final(rl: RLModels, tok, cfg: Config, run_dir: Path) -> None:
    """The trained model in run_dir/model (LoRA: adapter in run_dir/adapter, merged model in
    run_dir/model unless lora.merge_on_save is off); a PPO critic in run_dir/critic.pt."""
    if rl.lora:
        if cfg.lora.merge_on_save:
            merge_and_save(rl.policy, tok, run_dir / "model", run_dir / "adapter")
        else:
            rl.policy.save_pretrained(str(run_dir / "adapter"))
    else:
        save_policy(rl.policy, tok, run_dir / "model")
    if rl.critic is not None:
        torch.save(rl.critic.state_dict(), run_dir / "critic.pt")


def _write_trajectories(path: Path, trajs: list[Trajectory]) -> None:
    sink = JsonlSink(path)
    for t in trajs:
        sink.write(t.to_record())
    sink.close()
