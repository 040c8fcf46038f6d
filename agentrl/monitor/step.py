"""The namespaced metrics of one RL step (a line of ``metrics.jsonl``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import torch

from agentrl.types import Trajectory

#: Tool-call record flags counted as ``tool/<name>/<flag>_rate`` (``Trajectory.tool_calls``).
FLAGS = ("truncated_output", "coerced")


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
        "rollout/total_tokens": sum(len(t.token_ids) for t in trajs),
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
    by_env: dict[str, list[bool]] = {}
    for t in trajs:
        by_env.setdefault(t.info.get("env_id") or "", []).append(t.success)
    if len(by_env) > 1:  # a staged curriculum mixes families in one step
        for env_id, wins in sorted(by_env.items()):
            m[f"rollout/{env_id}/success_rate"] = sum(wins) / len(wins)
    m.update(tool_rates(trajs))
    parse_errors = sum(len(t.info["parse_errors"]) for t in trajs)
    m["tool/parse_error_per_episode"] = parse_errors / n
    for k, v in stats.items():
        key = {
            "entropy": "policy/entropy",
            "clip_frac": "policy/clip_frac",
            "grad_norm": "policy/grad_norm",
            "approx_kl_old": "policy/approx_kl_old",
            "updates": "policy/updates",
            "skipped": "policy/skipped_updates",
            "early_stop": "policy/early_stop",
            "value_clip_frac": "value/clip_frac",
        }.get(k, k if k.startswith("moe/") else f"loss/{k}")  # moe/: agentrl.algos.moe
        m[key] = v
    return m


def tool_rates(trajs: list[Trajectory]) -> dict[str, float]:
    """``tool/<name>/<class>_rate``: failed calls by error code, then the flagged calls.

    Each is a share of that tool's calls. The flags (``FLAGS``) mark calls that still count as
    made: an output cut to the size limit (the call stays ok) and arguments coerced before the
    call; a record without the flag counts as unflagged. A key appears once its count is > 0.
    """
    calls = Counter(c["name"] for t in trajs for c in t.tool_calls)
    errors = Counter(
        (c["name"], c.get("error_code"))
        for t in trajs
        for c in t.tool_calls
        if not c.get("ok", True)
    )
    flagged = Counter(
        (c["name"], flag) for t in trajs for c in t.tool_calls for flag in FLAGS if c.get(flag)
    )
    out: dict[str, float] = {}
    for (name, code), count in [*errors.items(), *sorted(flagged.items())]:
        out[f"tool/{name}/{code}_rate"] = count / max(calls[name], 1)
    return out
