"""``agentrl offline``: train a policy from logged episodes (DPO or IQL), then evaluate it on
the held-out episodes as ``agentrl train`` does.

The output directory is a run directory like a training run's: ``config.yaml``,
``metrics.jsonl`` (one line: the offline update's stats), ``eval.jsonl``,
``eval_before.jsonl`` / ``eval_after.jsonl``, ``summary.json`` (``success_before`` /
``success_after`` plus the offline figures) and ``model/``. The policy starts from the
config's model: by default the first run's own config with ``model.name`` set to its final
``model/``, so offline training continues where the logged run ended.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from agentrl.algos.batch import build_batch
from agentrl.algos.segments import segment_rows
from agentrl.config import Config, load_config
from agentrl.monitor.metrics import JsonlSink
from agentrl.monitor.status import crash_record, write_status
from agentrl.offline.awr import awr_update, token_weights
from agentrl.offline.dpo import log_pairs, train_dpo
from agentrl.offline.iql import awr_weights, episode_turns, fit_iql, turn_features
from agentrl.offline.logs import load_logs
from agentrl.train.build import (
    build_optimizer,
    build_rl_models,
    env_factory,
    load_generator,
    seed_everything,
)
from agentrl.train.loop import save_final
from agentrl.train.run import Run
from agentrl.types import Trajectory

ALGOS = ("dpo", "iql")


def offline_config(run_dirs: Sequence[str | Path], out: str | Path,
                   config: str | Path | None = None,
                   overrides: Sequence[str] = ()) -> Config:  # fmt: skip
    """The offline run's config: ``config``, or the first run's ``config.yaml`` with
    ``model.name`` = its final ``model/``; then ``overrides``; ``train.run_dir`` = ``out``."""
    first = Path(run_dirs[0])
    if not first.exists():
        raise FileNotFoundError(f"{first} does not exist")
    preset: list[str] = []
    if config is None:
        config = first / "config.yaml"
        if not config.is_file():
            raise FileNotFoundError(f"{first} has no config.yaml: pass --config CFG")
        if (first / "model").is_dir():
            preset.append(f"model.name={first / 'model'}")
    return load_config(config, [*preset, *overrides, f"train.run_dir={out}"])


def offline_train(
    cfg: Config,
    logs: Sequence[str | Path],
    algo: str,
    *,
    epochs: int = 1,
    batch_size: int = 8,
    console: Console | None = None,
) -> dict[str, Any]:
    """Train ``cfg.model`` from the episodes in ``logs`` (run directories or JSONL files) with
    ``algo`` (``dpo`` or ``iql``), evaluate before and after; the summary (summary.json)."""
    if algo not in ALGOS:
        raise ValueError(f"--algo must be one of {', '.join(ALGOS)}, got {algo!r}")
    console = console or Console(stderr=True)
    trajs = [e.traj for e in load_logs(logs)]  # a bad log fails before any model work
    run = Run(cfg, console)
    write_status(run.dir, "running")
    try:
        summary = _offline_run(run, cfg, trajs, algo, epochs, batch_size)
    except BaseException as err:
        write_status(run.dir, "crashed", **crash_record(err))
        raise
    write_status(run.dir, "finished")
    return summary


def _offline_run(run: Run, cfg: Config, trajs: list[Trajectory], algo: str, epochs: int,
                 batch_size: int) -> dict[str, Any]:  # fmt: skip
    make_env = env_factory(cfg)
    seed_everything(cfg.train.seed)
    model, tok, generator, _ = load_generator(cfg)
    evals = cfg.train.eval_episodes > 0
    before = run.evaluate(generator, make_env, "before", 0) if evals else {}
    t0 = time.time()
    step = _dpo if algo == "dpo" else _iql
    rl, stats = step(cfg, model, tok.pad_token_id, trajs, epochs, batch_size)
    stats["offline/train_s"] = time.time() - t0
    stats["offline/episodes"] = float(len(trajs))
    generator.model = rl.policy
    after = run.evaluate(generator, make_env, "after", 1) if evals else {}
    sink = JsonlSink(run.dir / "metrics.jsonl")
    sink.write({"step": 0, **stats})
    sink.close()
    if cfg.train.save_model:
        save_final(rl, tok, cfg, run.dir)
    summary = run.summary(before, after)
    summary.pop("steps")  # no RL step: the offline update is one pass over the logs
    summary |= {"algo": algo, "epochs": epochs, "offline": stats, "logs": len(trajs)}
    (run.dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _models(cfg: Config, model, algo: str):
    """Policy (LoRA applied where configured), reference for DPO, optimizer at ``algo.lr``."""
    name = "dpo" if algo == "dpo" else "grpo"  # a reference for DPO; never a PPO critic
    build_cfg = cfg.model_copy(update={"algo": cfg.algo.model_copy(update={"name": name})})
    rl = build_rl_models(model, build_cfg)
    return rl, build_optimizer(rl, cfg)


def _dpo(cfg: Config, model, pad_id: int, trajs: list[Trajectory], epochs: int,
         batch_size: int):  # fmt: skip
    a = cfg.algo
    pairs = log_pairs(trajs, a.dpo.min_gap)
    rl, optimizer = _models(cfg, model, "dpo")
    stats = train_dpo(rl.policy, rl.ref, optimizer, trajs, pairs, pad_id=pad_id,
                      beta=a.dpo.beta, epochs=epochs, batch_pairs=batch_size,
                      max_grad_norm=a.max_grad_norm, temperature=cfg.rollout.temperature,
                      seed=cfg.train.seed)  # fmt: skip
    stats.pop("stepped")
    return rl, {f"offline/{k}": v for k, v in stats.items()}


def _iql(cfg: Config, model, pad_id: int, trajs: list[Trajectory], epochs: int,
         batch_size: int):  # fmt: skip
    q = cfg.algo.iql
    valid = [t for t in trajs if not t.is_harness_fault]
    rows, owner = segment_rows(valid)
    turns = episode_turns(rows, owner.tolist(), valid, q.reward)
    if not turns:
        raise ValueError("no assistant turns in the logs' valid episodes: nothing to learn")
    model.eval()
    states, actions = turn_features(model, rows, turns, pad_id)  # the frozen start model
    qv, vv, stats = fit_iql(states, actions, turns, tau=q.tau, gamma=q.gamma,
                            steps=q.head_steps, lr=q.head_lr, seed=cfg.train.seed)  # fmt: skip
    weights = awr_weights(qv, vv, q.beta, q.weight_cap, q.normalize)  # (N,)
    rl, optimizer = _models(cfg, model, "iql")
    batch = build_batch(rows, torch.ones(len(rows), dtype=torch.bool), pad_id)
    upd = awr_update(rl.policy, optimizer, batch, token_weights(batch, turns, weights),
                     epochs=epochs, batch_rows=batch_size, max_grad_norm=cfg.algo.max_grad_norm,
                     temperature=cfg.rollout.temperature, seed=cfg.train.seed)  # fmt: skip
    upd.pop("stepped")
    stats |= {"iql/weight_mean": float(weights.mean()), "iql/weight_max": float(weights.max()),
              "iql/turns": float(len(turns))}  # fmt: skip
    return rl, stats | {f"offline/{k}": v for k, v in upd.items()}
