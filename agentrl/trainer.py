"""The one training loop: warm start -> evaluate -> (rollout -> reward -> advantage -> update
-> log) x steps -> evaluate -> save. Reads top to bottom."""

from __future__ import annotations

import copy
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from agentrl.algos.grpo import build_batch, compute_advantages, grpo_update, reference_logprobs
from agentrl.chat.render import stop_token_ids
from agentrl.config import Config, save_config
from agentrl.envs import make
from agentrl.envs.plugins import import_env_modules
from agentrl.envs.reference import run_reference_episode
from agentrl.eval.runner import evaluate
from agentrl.monitor.metrics import JsonlSink
from agentrl.policy.generate import HFGenerator
from agentrl.policy.loading import load_policy, save_policy
from agentrl.rollout import EpisodeSpec, run_episodes
from agentrl.sft import sft_train
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
    """A zero-argument function making a fresh environment for one episode."""
    import_env_modules(cfg.task.imports)
    kwargs = {
        "max_turns": cfg.task.max_turns,
        "reward_weights": cfg.reward.weights(),
        **cfg.task.env_kwargs,
    }
    make(cfg.task.env, **kwargs)  # fail now, with the env's own message, if kwargs are wrong
    return lambda: make(cfg.task.env, **kwargs)


def collect_demos(make_env, n: int, levels: list[int], seed0: int) -> list[tuple[list, list]]:
    """``n`` reference-solver episodes as (messages, tool schemas) SFT examples."""
    demos = []
    for i in range(n):
        env = make_env()
        messages, _ = run_reference_episode(env, seed0 + i, levels[i % len(levels)])
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


def step_metrics(
    step: int,
    trajs: list[Trajectory],
    valid: torch.Tensor,
    stats: dict[str, float],
    rollout_s: float,
    step_s: float,
) -> dict[str, Any]:
    """Namespaced metrics of one RL step: rollout, reward per layer, loss, policy, tools."""
    n = len(trajs)
    policy_tokens = sum(t.num_policy_tokens for t in trajs)
    m: dict[str, Any] = {
        "step": step,
        "rollout/episodes": n,
        "rollout/success_rate": sum(t.success for t in trajs) / n,
        "rollout/valid_fraction": float(valid.float().mean()),
        "rollout/policy_tokens": policy_tokens,
        "rollout/tokens_per_s": policy_tokens / max(rollout_s, 1e-9),
        "rollout/episodes_per_s": n / max(rollout_s, 1e-9),
        "rollout/mean_turns": sum(t.info["turns"] for t in trajs) / n,
        "reward/total": sum(t.reward.total for t in trajs) / n,
        "reward/std": float(np.std([t.reward.total for t in trajs])),
        "time/rollout_s": rollout_s,
        "time/step_s": step_s,
    }
    layers = sorted({k for t in trajs for k in t.reward.layers})
    for k in layers:
        m[f"reward/{k}"] = sum(t.reward.layers.get(k, 0.0) for t in trajs) / n
    for reason, count in Counter(t.termination for t in trajs).items():
        m[f"termination/{reason}"] = count / n
    calls = Counter(c["name"] for t in trajs for c in t.tool_calls)
    errors = Counter(
        (c["name"], c.get("error_code"))
        for t in trajs
        for c in t.tool_calls
        if not c.get("ok", True)
    )
    for (name, code), count in errors.items():
        m[f"tool/{name}/{code}_rate"] = count / max(calls[name], 1)
    parse_errors = sum(len(t.info["parse_errors"]) for t in trajs)
    m["tool/parse_error_per_episode"] = parse_errors / n
    for k, v in stats.items():
        key = {
            "entropy": "policy/entropy",
            "clip_frac": "policy/clip_frac",
            "grad_norm": "policy/grad_norm",
            "approx_kl_old": "policy/approx_kl_old",
            "updates": "policy/updates",
        }.get(k, f"loss/{k}")
        m[key] = v
    return m


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


def train(cfg: Config, *, progress: bool = True, console: Console | None = None) -> dict[str, Any]:
    """Warm-start, evaluate, train with GRPO, evaluate again; returns the run summary."""
    console = console or Console(stderr=True)
    t_start = time.time()
    run_dir = Path(cfg.train.run_dir)
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
    ro = cfg.rollout
    eval_kwargs = {
        "episodes": cfg.train.eval_episodes,
        "levels": cfg.train.eval_levels,
        "seed0": cfg.train.eval_seed,
        "max_new_tokens": ro.max_new_tokens,
        "max_total_tokens": ro.max_total_tokens,
    }

    # 1. Warm start: SFT on a few dozen reference demonstrations.
    if cfg.train.warmstart_demos > 0:
        demos = collect_demos(
            make_env,
            cfg.train.warmstart_demos,
            cfg.train.warmstart_levels,
            seed0=cfg.train.eval_seed // 2,
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
    if cfg.train.eval_episodes:
        console.print(f"evaluating before RL on {cfg.train.eval_episodes} held-out episodes")
        before, trajs = evaluate(generator, make_env, **eval_kwargs)
        _write_trajectories(run_dir / "eval_before.jsonl", trajs)
        console.print(
            f"success before RL: {before['success_rate']:.3f} {before['success_by_level']}"
        )

    # 3. RL.
    ref_model = copy.deepcopy(model).eval() if cfg.algo.kl_coef > 0 else None
    if ref_model is not None:
        ref_model.requires_grad_(False)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay
    )
    metrics = JsonlSink(run_dir / "metrics.jsonl")
    traj_sink = JsonlSink(run_dir / "trajectories.jsonl")
    with _progress(console, progress) as bar:
        task = bar.add_task("GRPO", total=cfg.train.steps, info="")
        for step in range(cfg.train.steps):
            t0 = time.time()
            specs = sample_specs(
                rng,
                ro.groups_per_step,
                ro.group_size,
                cfg.task.levels,
                cfg.train.eval_seed,
                step * ro.groups_per_step,
            )
            trajs = run_episodes(
                generator,
                make_env,
                specs,
                max_new_tokens=ro.max_new_tokens,
                max_total_tokens=ro.max_total_tokens,
                temperature=ro.temperature,
                top_p=ro.top_p,
            )
            rollout_s = time.time() - t0
            advantages, valid = compute_advantages(
                trajs, cfg.algo.truncation, cfg.algo.scale_rewards
            )
            batch = build_batch(trajs, advantages, valid, tok.pad_token_id)
            if ref_model is not None:
                batch.ref_logp = reference_logprobs(ref_model, batch, ro.temperature)
            stats = grpo_update(
                model,
                optimizer,
                batch,
                clip_eps=cfg.algo.clip_eps,
                kl_coef=cfg.algo.kl_coef,
                loss_agg=cfg.algo.loss_agg,
                epochs=cfg.algo.epochs,
                minibatches=cfg.algo.minibatches,
                max_grad_norm=cfg.algo.max_grad_norm,
                temperature=ro.temperature,
                rng=rng,
            )
            m = step_metrics(step, trajs, valid, stats, rollout_s, time.time() - t0)
            metrics.write(m)
            for t in trajs:
                traj_sink.write({"step": step, **t.to_record()})
            bar.update(
                task,
                advance=1,
                info=f"success {m['rollout/success_rate']:.2f} "
                f"reward {m['reward/total']:.2f} kl {m.get('loss/kl', 0.0):.4f}",
            )
    metrics.close()
    traj_sink.close()

    # 4. Final evaluation and save.
    after: dict[str, Any] = {}
    if cfg.train.eval_episodes:
        console.print(f"evaluating after RL on {cfg.train.eval_episodes} held-out episodes")
        after, trajs = evaluate(generator, make_env, **eval_kwargs)
        _write_trajectories(run_dir / "eval_after.jsonl", trajs)
        console.print(f"success after RL: {after['success_rate']:.3f} {after['success_by_level']}")
    if cfg.train.save_model:
        save_policy(model, tok, run_dir / "model")
    summary = {
        "success_before": before.get("success_rate"),
        "success_after": after.get("success_rate"),
        "episodes": cfg.train.eval_episodes,
        "eval_before": before,
        "eval_after": after,
        "steps": cfg.train.steps,
        "run_dir": str(run_dir),
        "wall_s": round(time.time() - t_start, 1),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _write_trajectories(path: Path, trajs: list[Trajectory]) -> None:
    sink = JsonlSink(path)
    for t in trajs:
        sink.write(t.to_record())
    sink.close()
