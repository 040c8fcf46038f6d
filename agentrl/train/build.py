"""What a run builds once: device and dtype, the env factory, the policy and its generator,
the warm start, and at RL start the reference, critic, LoRA and optimizer."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from agentrl.algos.kl import KLController
from agentrl.algos.value import Critic, make_critic
from agentrl.chat.render import stop_token_ids
from agentrl.config import Config
from agentrl.curriculum import family_levels
from agentrl.engine.decoder import Engine
from agentrl.engine.shadow import decode_dtype
from agentrl.envs import make
from agentrl.envs.plugins import import_env_modules
from agentrl.envs.reference import run_reference_episode
from agentrl.memory.demos import memory_rows
from agentrl.planning.hierarchy import hierarchical_demos
from agentrl.policy.loading import load_policy
from agentrl.precision import autocast_dtype
from agentrl.sft import sft_train, train_rows
from agentrl.tools import runtime as tools_runtime


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
    ``task.env`` only; every env gets the run's ``max_turns`` and reward weights. Builds each
    env once now, so a bad id, kwarg or missing extra fails before any model work.
    """
    import_env_modules(cfg.task.imports)
    tools_runtime.configure(cfg.tools)
    common = {"max_turns": cfg.task.max_turns, "reward_weights": cfg.reward.weights(),
              "last_actions": cfg.task.last_actions,
              "plan_execute": cfg.rollout.mode == "plan_execute"}  # fmt: skip
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


def load_generator(cfg: Config) -> tuple[Any, Any, Engine, str]:
    """(model, tokenizer, generator, device) for ``cfg.model``."""
    device = resolve_device(cfg.model.device)
    dtype = resolve_dtype(cfg.model.dtype, device)
    model, tok = load_policy(
        cfg.model.name, dtype=dtype, device=device, chat_template=cfg.model.chat_template
    )
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id,
                    dtype=decode_dtype(cfg.rollout.dtype, model, device))  # fmt: skip
    return model, tok, engine, device


def collect_demos(
    make_env, n: int, levels: list[int], seed0: int, env_ids: list[str] | None = None
) -> list[tuple[list, list]]:
    """``n`` reference-solver episodes as (messages, tool schemas) SFT examples (a team env,
    ``agentrl.multiagent``, gives one per agent).

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
        if hasattr(env, "reference_demos"):  # a team env: each agent's side of the episode
            demos += env.reference_demos(seed0 + i, level)
            continue
        messages, _ = run_reference_episode(env, seed0 + i, level)
        demos.append((messages, env.tool_schemas))
    return demos


#: The warm start's micro-batches hold at most this many logits (rows x length x vocabulary,
#: 0.5 GB in fp32): SmolLM2 (49,152 entries) then takes ~2,700 tokens per forward, 8.3 GB at
#: peak; the whole batch of 8 long shop or ledger demonstrations needs 50 GB or more (the
#: shop's warm start was killed for memory at 24 GB). The tiny model (2,052 entries) never
#: splits a batch.
WARMSTART_MAX_LOGITS = 2**27


def warm_start(cfg: Config, model, tok, make_env, console: Console, progress: bool) -> None:
    """SFT on ``train.warmstart_demos`` reference demonstrations (none when it is 0), or
    another run's saved warm start (``train.warmstart_from``)."""
    t = cfg.train
    device = str(next(model.parameters()).device)
    if t.warmstart_from:
        from agentrl.eval.weights import load_start_weights

        load_start_weights(model, Path(t.warmstart_from), device, "train.warmstart_from")
        console.print(f"warm start: the weights saved by {t.warmstart_from} (no SFT)")
        return
    if t.warmstart_demos <= 0:
        return
    env_ids = cfg.curriculum.env_ids() if cfg.curriculum.staged else None
    if cfg.rollout.mode == "hierarchical":  # one SFT example per manager / worker context
        demos = hierarchical_demos(make_env, t.warmstart_demos, t.warmstart_levels,
                                   t.warmstart_seed, cfg.rollout.hierarchy)  # fmt: skip
    else:
        demos = collect_demos(make_env, t.warmstart_demos, t.warmstart_levels,
                              t.warmstart_seed, env_ids)  # fmt: skip
    # whole demonstrations: a shop or ledger episode runs past sft_train's default 1,024
    # tokens, and a cut one never shows the final answer
    max_len = max(1024, cfg.rollout.max_total_tokens)
    kwargs = {"epochs": t.warmstart_epochs, "lr": t.warmstart_lr, "seed": t.seed,
              "batch_size": t.warmstart_batch_size, "stop_loss": t.warmstart_stop_loss,
              "progress": progress, "desc": "warm start",
              "amp_dtype": autocast_dtype(t.autocast, device),
              "max_logits": WARMSTART_MAX_LOGITS}  # fmt: skip
    memory = cfg.rollout.memory
    if not memory.enabled:
        console.print(f"warm start: SFT on {len(demos)} reference demonstrations")
        _print_sft_end(console, sft_train(model, tok, demos, max_len=max_len, **kwargs))
        return
    # with memory, each demonstration as the contexts a memory rollout would see
    rows = [(ids[:max_len], mask[:max_len]) for msgs, tools in demos
            for ids, mask in memory_rows(tok, msgs, tools, memory)]  # fmt: skip
    console.print(f"warm start: SFT on {len(demos)} reference demonstrations "
                  f"({len(rows)} memory contexts)")  # fmt: skip
    _print_sft_end(console, train_rows(model, tok, rows, **kwargs))


def _print_sft_end(console: Console, result: dict) -> None:
    """Where the warm start ended: all its planned steps, or stopped early by its loss."""
    steps, planned, loss = result["steps"], result["planned_steps"], result["final_loss"]
    why = "" if steps == planned else " (stopped early: train.warmstart_stop_loss reached)"
    console.print(f"warm start: {steps}/{planned} steps, final loss {loss:.4f}{why}")


@dataclass
class RLModels:
    """The policy being trained (maybe a peft model), its reference and its critic."""

    policy: Any
    ref: Any | None  # frozen reference policy (None when no KL is used)
    critic: Critic | None  # PPO only
    lora: bool = False


def build_rl_models(model: Any, cfg: Config) -> RLModels:
    """Reference, critic, gradient checkpointing and LoRA around ``model`` (at RL start)."""
    from agentrl.policy.lora import AdapterDisabled, apply_lora
    from agentrl.policy.roles import ROLES, per_role

    a, lo = cfg.algo, cfg.lora
    needs_ref = a.kl.coef > 0 or a.name == "dpo"  # DPO's implicit reward needs it too
    critic = make_critic(model, a.ppo.critic) if a.name == "ppo" else None
    if cfg.train.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if critic is not None and critic.separate:
            critic.backbone.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
    if lo.enabled:
        model = apply_lora(model, rank=lo.rank, alpha=lo.alpha, dropout=lo.dropout,
                           target_modules=lo.target_modules,
                           adapter_names=ROLES if per_role(cfg) else ("default",))  # fmt: skip
        ref = AdapterDisabled(model) if needs_ref else None  # the frozen base, no copy
        return RLModels(model, ref, critic, lora=True)
    ref = None
    if needs_ref:
        ref = copy.deepcopy(model).eval()
        ref.requires_grad_(False)
    return RLModels(model, ref, critic)


def build_optimizer(rl: RLModels, cfg: Config) -> torch.optim.AdamW:
    """AdamW over the trainable policy parameters (and the critic's, as a second group).

    Each group carries ``lr_ratio``: its LR is the schedule's LR times this ratio (LoRA:
    ``lora.lr_scale``; critic: ``algo.ppo.value_lr / algo.lr``).
    """
    a = cfg.algo
    ratio = cfg.lora.lr_scale if rl.lora else 1.0
    groups = [{"params": [p for p in rl.policy.parameters() if p.requires_grad], "lr_ratio": ratio}]
    if rl.critic is not None:
        value_ratio = (a.ppo.value_lr / a.lr) if a.ppo.value_lr else ratio
        groups.append({"params": list(rl.critic.parameters()), "lr_ratio": value_ratio})
    for g in groups:
        g["lr"] = a.lr * g["lr_ratio"]
    return torch.optim.AdamW(groups, lr=a.lr, weight_decay=a.weight_decay)


def make_kl_controller(cfg: Config) -> KLController:
    k = cfg.algo.kl
    return KLController(k.control, k.coef, target=k.target, horizon=k.horizon,
                        decay_rate=k.decay_rate, decay_every=k.decay_every)  # fmt: skip
