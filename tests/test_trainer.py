"""Integration: a few GRPO steps on the tiny model change the parameters and write the run."""

import json

import torch

from agentrl.config import build_config
from agentrl.trainer import train


def test_grpo_steps_change_parameters_and_write_run_dir(tiny_dir, tmp_path):
    from agentrl.policy.loading import load_policy

    before, _ = load_policy(str(tiny_dir))
    run = tmp_path / "run"
    cfg = build_config(
        {},
        [
            f"model.name={tiny_dir}",
            f"train.run_dir={run}",
            "train.steps=2",
            "train.eval_episodes=4",
            "train.warmstart_demos=0",
            "rollout.group_size=4",
            "rollout.groups_per_step=2",
            "rollout.max_new_tokens=32",
            "rollout.max_total_tokens=500",
            "algo.kl_coef=0.05",
        ],
    )
    summary = train(cfg, progress=False)
    assert 0.0 <= summary["success_before"] <= 1.0 and 0.0 <= summary["success_after"] <= 1.0
    assert summary["episodes"] == 4 and summary["run_dir"] == str(run)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1]
    for key in (
        "reward/total",
        "reward/format",
        "reward/completion",
        "loss/policy",
        "loss/kl",
        "policy/entropy",
        "rollout/tokens_per_s",
        "time/step_s",
        "rollout/success_rate",
    ):
        assert key in lines[0], key
    assert lines[0]["rollout/episodes"] == 8
    trajs = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 16
    assert {"messages", "tool_calls", "reward", "termination"} <= set(trajs[0])
    assert trajs[0]["termination"] in (
        "success",
        "failure",
        "max_turns",
        "length",
        "tool_timeout",
        "harness_error",
    )
    assert (run / "config.yaml").is_file() and (run / "summary.json").is_file()
    after, _ = load_policy(str(run / "model"))
    changed = [
        n
        for (n, p), (_, q) in zip(before.named_parameters(), after.named_parameters(), strict=True)
        if not torch.equal(p, q)
    ]
    assert len(changed) > 0  # only GRPO touched the weights (no warm start here)
    assert lines[0]["policy/updates"] == 2.0
