"""``agentrl doctor``: the seeds' troubleshooting tables (MISSION.md F) as checks over a run
directory. Each check is a pure function of ``RunData`` that returns a ``Finding`` or None:
a stable ``code``, a severity, the evidence (a metric window, example episodes with the turn
that shows it) and the seed's cure as ``--set`` overrides for the next run.

Severities: ``error`` (the run is broken: fix before training on), ``warning`` (it learns
worse than it could), ``info`` (worth a look).
"""

from __future__ import annotations

from collections.abc import Callable

from agentrl.monitor.episode_checks import (
    check_format_errors,
    check_length,
    check_one_tool,
    check_repeated_calls,
)
from agentrl.monitor.findings import SEVERITY_ORDER, Finding, median, scaled, thirds, window
from agentrl.monitor.rundata import RunData

__all__ = ["CHECKS", "Finding", "diagnose", "run_state"]


# -- the run's life ---------------------------------------------------------------------------
def check_crash(data: RunData) -> Finding | None:
    """A crashed or killed run: out of memory (by the error, or killed without a trace)."""
    status = data.status or {}
    state = status.get("state")
    if state not in ("crashed", "killed"):
        return None
    micro = data.setting("algo.micro_batch_tokens", "auto")
    memory_fix = [
        f"algo.micro_batch_tokens={2048 if micro == 'auto' else max(int(micro) // 2, 256)}",
        "train.gradient_checkpointing=true",
        "lora.enabled=true",
        f"rollout.groups_per_step={max(int(data.setting('rollout.groups_per_step', 8)) // 2, 1)}",
    ]
    evidence = {"state": state, "steps_logged": len(data.metrics), "pid": status.get("pid")}
    if state == "killed":
        return Finding(
            "out_of_memory",
            "error",
            "the run's process is gone without a trace: killed (most often the "
            "kernel's out-of-memory killer)",
            evidence,
            memory_fix,
        )
    evidence.update(error=status.get("error"), traceback=status.get("traceback"))
    if status.get("out_of_memory"):
        return Finding("out_of_memory", "error", "the run ran out of memory", evidence, memory_fix)
    return Finding(
        "run_crashed",
        "error",
        f"the run crashed: {status.get('error')}",
        evidence,
        [f"agentrl train --resume {data.path}  (after fixing the error)"],
    )


def check_nonfinite(data: RunData) -> Finding | None:
    skipped = sum(data.series("policy/skipped_updates"))
    nan_rewards = sum(1 for m in data.metrics if str(m.get("reward/total")) in ("nan", "inf"))
    if not skipped and not nan_rewards:
        return None
    lr = float(data.setting("algo.lr", 3e-4))
    return Finding(
        "nonfinite_updates",
        "error",
        f"{int(skipped)} update(s) skipped for a non-finite loss or gradient, "
        f"{nan_rewards} step(s) with a non-finite reward",
        window(data, "policy/skipped_updates"),
        [f"algo.lr={scaled(lr, 0.1)}", "train.autocast=off"],
    )


# -- KL and entropy ---------------------------------------------------------------------------
def check_kl_explosion(data: RunData) -> Finding | None:
    kl = data.series("loss/kl")
    if len(kl) < 2:
        return None
    start, end = thirds(kl)
    if max(kl) <= 1.0 and not (end > 0.1 and end > 10 * max(start, 1e-3)):
        return None
    coef, lr = float(data.setting("algo.kl.coef", 0.05)), float(data.setting("algo.lr", 3e-4))
    return Finding(
        "kl_explosion",
        "error",
        f"KL to the reference blew up: max {max(kl):.3g}, {start:.3g} -> {end:.3g}",
        window(data, "loss/kl"),
        [f"algo.kl.coef={scaled(max(coef, 0.01), 5)}", f"algo.lr={scaled(lr, 1 / 3)}"],
    )


def check_kl_unconstrained(data: RunData) -> Finding | None:
    coefs = data.series("train/kl_coef")
    if len(coefs) < 20 or any(c > 0 for c in coefs):
        return None
    return Finding(
        "kl_unconstrained",
        "warning",
        f"{len(coefs)} steps with KL coefficient 0: nothing holds the policy near the "
        "reference (and no KL is measured), so general ability can drift",
        {
            "metric": "train/kl_coef",
            "steps": len(coefs),
            "value": 0.0,
            "general_drop": (data.summary or {}).get("general_drop"),
        },
        ["algo.kl.coef=0.02", "algo.kl.control=adaptive"],
    )


def check_entropy(data: RunData) -> Finding | None:
    """Entropy spiking above 3x its median so far (lr too large: cosine) or collapsing while
    success is low (premature convergence)."""
    ent = data.series("policy/entropy")
    if len(ent) < 6:
        return None
    lr = float(data.setting("algo.lr", 3e-4))
    before = [(i, median(ent[:i])) for i in range(3, len(ent))]
    spike = next(((i, m) for i, m in before if ent[i] > 3 * m and ent[i] - m > 0.5), None)
    if spike is not None:
        at, base = spike
        return Finding(
            "entropy_spike",
            "warning",
            f"policy entropy spiked to {ent[at]:.3g} at logged step {at + 1} "
            f"(median before it {base:.3g})",
            window(data, "policy/entropy"),
            [f"algo.lr={scaled(lr, 0.5)}", "algo.schedule.lr=cosine"],
        )
    start, end = thirds(ent)
    success = data.series("rollout/success_rate")
    if start > 0 and end < 0.25 * start and success and thirds(success)[1] < 0.5:
        temp = float(data.setting("rollout.temperature", 0.7))
        return Finding(
            "premature_convergence",
            "warning",
            f"entropy fell {start:.3g} -> {end:.3g} while success is "
            f"{thirds(success)[1]:.2f}: the policy stopped exploring",
            window(data, "policy/entropy"),
            [f"rollout.temperature={min(temp + 0.2, 1.2):.2g}", "algo.entropy_coef=0.01"],
        )
    return None


# -- rewards ----------------------------------------------------------------------------------
def check_reward_trend(data: RunData) -> Finding | None:
    """Reward flat (too sparse, lr too small) or oscillating (too few rollouts)."""
    reward = data.series("reward/total")
    if len(reward) < 6:
        return None
    start, end = thirds(reward)
    spread = data.series("reward/std")
    diffs = [b - a for a, b in zip(reward, reward[1:], strict=False)]
    jitter = sum(abs(d) for d in diffs) / len(diffs)
    flips = sum(1 for a, b in zip(diffs, diffs[1:], strict=False) if a * b < 0)
    lr = float(data.setting("algo.lr", 3e-4))
    group = int(data.setting("rollout.group_size", 8))
    if abs(end - start) < 0.02 and jitter < 0.05:
        no_signal = bool(spread) and max(spread) < 1e-6
        why = (
            "every episode scores the same: no signal for the advantages"
            if no_signal
            else ("too sparse a reward or too small a learning rate")
        )
        return Finding(
            "reward_flat",
            "warning",
            f"mean reward flat at {end:.3g} over {len(reward)} steps ({why})",
            {**window(data, "reward/total"), "reward_std_max": max(spread, default=0)},
            ["reward.progress=0.5", f"algo.lr={scaled(lr, 3)}", "train.warmstart_demos=64"],
        )
    if jitter > 0.1 and jitter > 2 * abs(end - start) and flips >= 0.6 * (len(diffs) - 1):
        return Finding(
            "reward_oscillating",
            "warning",
            f"mean reward swings {jitter:.3g} per step around a trend of "
            f"{end - start:+.3g}: too few rollouts per step",
            window(data, "reward/total"),
            [f"rollout.group_size={group * 2}", "algo.reward_norm=running"],
        )
    return None


def check_reward_hacking(data: RunData) -> Finding | None:
    """Reward gained outside task completion: the format-only / shaping-only signature."""
    form = [k for k in ("format", "tool_choice", "arguments", "progress")
            if float(data.setting(f"reward.{k}", 0.0)) > 0]  # fmt: skip
    if float(data.setting("reward.completion", 1.0)) <= 0 and form:
        return Finding(
            "reward_hacking",
            "error",
            "reward.completion is 0: the task's verifier does not count, so the "
            "policy is paid for form (format, tool choice) whatever the outcome",
            {"setting": "reward.completion", "value": data.setting("reward.completion")},
            ["reward.completion=1.0", "reward.format=0.1"],
        )
    total, done = data.series("reward/total"), data.series("reward/completion")
    if len(total) < 6 or len(done) < 6:
        return None
    (t0, t1), (c0, c1) = thirds(total), thirds(done)
    if t1 - t0 > 0.1 and abs(c1 - c0) < 0.02:
        return Finding(
            "reward_hacking",
            "warning",
            f"reward rose {t0:.3g} -> {t1:.3g} while completion stayed "
            f"{c0:.3g} -> {c1:.3g}: the gain comes from the shaping layers",
            {**window(data, "reward/total"), "completion": window(data, "reward/completion")},
            ["reward.format=0.05", "reward.tool_choice=0.1"],
        )
    return None


def check_general_drop(data: RunData) -> Finding | None:
    drop = (data.summary or {}).get("general_drop")
    if drop is None or drop <= 0.1:
        return None
    coef = float(data.setting("algo.kl.coef", 0.05))
    best = max(data.evals, key=lambda p: p.get("success_rate", 0), default=None)
    fix = [f"algo.kl.coef={scaled(max(coef, 0.01), 2)}"]
    if best and best.get("step"):
        fix.append(f"train.steps={best['step']}")
    s = data.summary or {}
    return Finding(
        "general_drop",
        "warning",
        f"general capability fell {s.get('general_before')} -> {s.get('general_after')}",
        {
            "general_before": s.get("general_before"),
            "general_after": s.get("general_after"),
            "best_eval_step": best.get("step") if best else None,
        },
        fix,
    )


def check_late_weakness(data: RunData) -> Finding | None:
    """Weak late in long tasks: the top level far below level 1 after RL."""
    if not data.evals:
        return None
    by = {int(k): v for k, v in data.evals[-1].get("success_by_level", {}).items()}
    if len(by) < 2:
        return None
    low, high = by[min(by)], by[max(by)]
    if low < 0.3 or high > 0.5 * low or low - high < 0.3:
        return None
    fix = ["curriculum.enabled=true"]
    if data.setting("algo.name") == "ppo":
        fix.insert(0, "algo.ppo.gamma_start=0.9")
    return Finding(
        "late_task_weakness",
        "info",
        f"level {max(by)} success {high:.2f} vs level {min(by)} {low:.2f}: weak on the long tasks",
        {"success_by_level": by},
        fix,
    )


CHECKS: list[Callable[[RunData], Finding | None]] = [
    check_crash,
    check_nonfinite,
    check_kl_explosion,
    check_kl_unconstrained,
    check_entropy,
    check_reward_trend,
    check_reward_hacking,
    check_general_drop,
    check_format_errors,
    check_repeated_calls,
    check_length,
    check_one_tool,
    check_late_weakness,
]


def diagnose(data: RunData) -> list[Finding]:
    """Every check's finding, most severe first."""
    found = [f for check in CHECKS if (f := check(data)) is not None]
    return sorted(found, key=lambda f: SEVERITY_ORDER[f.severity])


def run_state(data: RunData) -> str:
    """running / finished / stopped / crashed / killed, or ``unknown`` (no status.json)."""
    return (data.status or {}).get("state", "finished" if data.summary else "unknown")
