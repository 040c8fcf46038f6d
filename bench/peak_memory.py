"""Peak memory and time of one GRPO update, before and after the chunked LM head and the
``algo.micro_batch_tokens: auto`` budget, at 32, 64 and 128 episodes per step.

Run from the repository root::

    python bench/peak_memory.py                          # tiny model, ~3 min on 2 CPU cores
    python bench/peak_memory.py --json peak.json
    python bench/peak_memory.py --model agentrl/smollm2-135m --episodes 32   # a real model
    python bench/peak_memory.py --arch smollm2-135m --episodes 32            # its shapes only

Each setting runs in a fresh process; its peak is the kernel's high-water mark of resident
memory (``VmHWM``), its baseline the resident memory just before the update (policy, reference
copy, optimizer and batch built). One update = what an RL step does after the rollout: the
reference pass (``reference_logprobs``) and ``grpo_update`` with the default ``algo`` settings
(1 epoch, 2 minibatches, KL 0.02, AdamW). The batch is synthetic, with the shape of real
episodes: a ~400-token prompt (350 tokens shared by every episode: the system turn with the
tool schemas; 50 per group of 8), then ~120 policy tokens in two assistant turns around a
20-token tool reply, lengths jittered by up to 20%. ``--repeat K`` runs every setting K times
(interleaved) and reports the largest peak and the shortest times: on a shared machine the
other load only ever adds time.

- ``before``: full (B, T, V) logits (``agentrl.algos.forward.CHUNKED_HEAD = False``) and no
  micro-batch limit (``micro_batch_tokens = 0``), the defaults before this change.
- ``after``: the defaults now (chunked LM head, ``micro_batch_tokens = auto``).
- ``chunked`` (on request): chunked head, no micro-batch limit (the head's share alone).

``--arch smollm2-135m`` builds a randomly initialized model of SmolLM2-135M's shapes (Llama,
30 layers, hidden 576, vocab 49,152): memory and time depend on shapes, not weights, and no
file is needed. Not a test: nothing checks these numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODES = ("before", "after", "chunked")
GROUP = 8  # episodes per task instance (rollout.group_size's default)
ARCHS = {  # published configs, random weights
    "smollm2-135m": dict(
        vocab_size=49_152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=100_000.0,
    ),
}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="agentrl/tiny", help="model id or HF directory")
    p.add_argument("--arch", choices=sorted(ARCHS), default=None,
                   help="random weights of a known model's shapes instead of --model")  # fmt: skip
    p.add_argument("--episodes", type=int, nargs="+", default=[32, 64, 128])
    p.add_argument("--modes", nargs="+", choices=MODES, default=["before", "after"])
    p.add_argument("--prompt", type=int, default=400, help="prompt tokens per episode")
    p.add_argument("--completion", type=int, default=120, help="policy tokens per episode")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("--repeat", type=int, default=1, help="runs of every setting (min time)")
    p.add_argument("--json", type=Path, default=None, help="also write the table here")
    p.add_argument("--worker", choices=MODES, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in bytes."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return out


def _load(args: argparse.Namespace):
    import torch

    if args.arch:
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(**ARCHS[args.arch])).float()
    from agentrl.policy.loading import load_policy

    return load_policy(args.model, dtype="float32", device="cpu")[0]


def synthetic_batch(n: int, vocab: int, prompt: int, completion: int, seed: int = 0):
    """A right-padded ``Batch`` of ``n`` episodes shaped like real multi-turn ones."""
    import torch

    from agentrl.algos.batch import Batch

    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    shared = torch.randint(3, vocab, (prompt - 50,), generator=g)
    rows, masks = [], []
    for i in range(n):
        if i % GROUP == 0:
            user = torch.randint(3, vocab, (50,), generator=g)
        turns = [max(8, int(completion / 2 * rng.uniform(0.8, 1.2))) for _ in range(2)]
        tool = max(4, int(20 * rng.uniform(0.8, 1.2)))
        parts = [shared, user, *(torch.randint(3, vocab, (k,), generator=g) for k in
                                 (turns[0], tool, turns[1]))]  # fmt: skip
        rows.append(torch.cat(parts))
        masks.append([0] * prompt + [1] * turns[0] + [0] * tool + [1] * turns[1])
    width = max(len(r) for r in rows)
    ids = torch.zeros(n, width, dtype=torch.long)
    attention = torch.zeros(n, width, dtype=torch.long)
    mask = torch.zeros(n, width)
    for i, (r, m) in enumerate(zip(rows, masks, strict=True)):
        ids[i, : len(r)], attention[i, : len(r)] = r, 1
        mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    return Batch(ids, attention, ids[:, 1:], mask[:, 1:], torch.zeros(n, width - 1))


def worker(args: argparse.Namespace, n: int) -> dict[str, Any]:
    """One update in this process (``--worker MODE``); returns its figures."""
    import copy

    import torch

    from agentrl.algos import forward, grpo, memory
    from agentrl.algos.advantages import group_advantages
    from agentrl.config.algo import AlgoConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    mode = args.worker
    forward.CHUNKED_HEAD = mode != "before"
    a = AlgoConfig()
    budget = a.micro_batch_tokens if mode == "after" else 0
    model = _load(args)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=a.lr)
    batch = synthetic_batch(n, model.config.vocab_size, args.prompt, args.completion)
    groups = torch.arange(n) // GROUP
    advantages = group_advantages(torch.randn(n, generator=torch.Generator().manual_seed(1)),
                                  groups, torch.ones(n, dtype=torch.bool), scale=True)  # fmt: skip
    calls = []  # padded tokens of each micro-batch the update runs
    inner = grpo.forward_logprobs

    def counted(m, mb, *rest, **kw):
        calls.append(mb.input_ids.numel())
        return inner(m, mb, *rest, **kw)

    grpo.forward_logprobs = counted
    base = _status()["VmRSS"]
    t0, c0 = time.perf_counter(), time.process_time()
    ref_logp = forward.reference_logprobs(ref, batch, 1.0)
    t1, c1 = time.perf_counter(), time.process_time()
    batch = dataclasses.replace(batch, old_logp=ref_logp, ref_logp=ref_logp)  # policy = ref
    stats = grpo.grpo_update(
        model, opt, batch, advantages, clip_eps=a.clip_eps, kl_coef=a.kl.coef,
        loss_agg=a.loss_agg, epochs=a.epochs, minibatches=a.minibatches,
        max_grad_norm=a.max_grad_norm, temperature=1.0, rng=random.Random(0),
        grad_accum=a.grad_accum, token_budget=budget, kl_kind=a.kl.estimator,
    )  # fmt: skip
    t2, c2 = time.perf_counter(), time.process_time()
    resolved = memory.resolve_token_budget(budget, model, opt)
    return {
        "episodes": n, "mode": mode, "tokens": int(batch.attention.sum()),
        "padded_width": batch.input_ids.shape[1], "micro_batch_tokens": resolved,
        "micro_batches": len(calls), "max_micro_batch_tokens": max(calls),
        "baseline_mib": base / 2**20, "peak_mib": _status()["VmHWM"] / 2**20,
        "update_peak_mib": (_status()["VmHWM"] - base) / 2**20,
        "ref_s": t1 - t0, "update_s": t2 - t1, "ref_cpu_s": c1 - c0, "update_cpu_s": c2 - c1,
        "threads": torch.get_num_threads(), "updates": stats["updates"],
    }  # fmt: skip


def run_setting(args: argparse.Namespace, mode: str, n: int) -> dict[str, Any]:
    """``worker`` in a fresh interpreter; its JSON line back."""
    cmd = [sys.executable, __file__, "--worker", mode, "--episodes", str(n), "--model",
           args.model, "--prompt", str(args.prompt), "--completion", str(args.completion),
           "--threads", str(args.threads)]  # fmt: skip
    if args.arch:
        cmd += ["--arch", args.arch]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode == -9:  # SIGKILL: the kernel's OOM killer, most likely
        return {"episodes": n, "mode": mode, "failed": "killed (SIGKILL: out of memory?)"}
    if out.returncode != 0:
        raise SystemExit(f"{mode} at {n} episodes failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (episodes, mode): the largest peaks, the shortest times, over repeats."""
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    for r in runs:
        key = (r["episodes"], r["mode"])
        if "failed" in r or "failed" in rows.get(key, {}):
            rows[key] = r if "failed" in r else rows[key]
            continue
        if key not in rows:
            rows[key] = dict(r)
            continue
        row = rows[key]
        for k in ("baseline_mib", "peak_mib", "update_peak_mib"):
            row[k] = max(row[k], r[k])
        for k in ("ref_s", "update_s", "ref_cpu_s", "update_cpu_s"):
            row[k] = min(row[k], r[k])
    return list(rows.values())


def print_table(rows: list[dict[str, Any]], label: str) -> None:
    print(f"\nOne GRPO update (reference pass + update), {label}")
    print("| episodes | mode | micro_batch_tokens | micro-batches | baseline MiB | peak MiB "
          "| peak over baseline MiB | ref s | update s | ref CPU s | update CPU s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "failed" in r:
            print(f"| {r['episodes']} | {r['mode']} | {r['failed']} |" + " |" * 8)
            continue
        print(f"| {r['episodes']} | {r['mode']} | {r['micro_batch_tokens'] or 'no limit'} | "
              f"{r['micro_batches']} | {r['baseline_mib']:.0f} | {r['peak_mib']:.0f} | "
              f"{r['update_peak_mib']:.0f} | {r['ref_s']:.1f} | {r['update_s']:.1f} | "
              f"{r['ref_cpu_s']:.1f} | {r['update_cpu_s']:.1f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args, args.episodes[0])))
        return
    label = f"--arch {args.arch} (random weights)" if args.arch else args.model
    settings = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
                f"load {os.getloadavg()[0]:.2f}, prompt {args.prompt} + completion "
                f"{args.completion} tokens")  # fmt: skip
    print(f"{label}: {settings}", flush=True)
    runs = []
    for _ in range(args.repeat):
        for n in args.episodes:
            for mode in args.modes:
                runs.append(r := run_setting(args, mode, n))
                if "failed" in r:
                    print(f"  {n} episodes, {mode}: {r['failed']}", flush=True)
                    continue
                print(f"  {n} episodes, {mode}: peak {r['peak_mib']:.0f} MiB, reference "
                      f"{r['ref_s']:.1f} s, update {r['update_s']:.1f} s", flush=True)  # fmt: skip
    rows = summarize(runs)
    print_table(rows, label)
    if args.json:
        out = {"model": label, "settings": settings, "rows": rows, "runs": runs}
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
