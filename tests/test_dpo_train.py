"""``algo.name: dpo`` through the real training loop on the tiny model: each group's best
episode is preferred to its worst, the reference is the weights at RL start, and steps with
a pair move the policy toward the chosen episodes (episodes call tools through
``runhelpers.ToolCallingGenerator``, so the rewards in a group differ)."""

from __future__ import annotations

import json

import pytest
import torch
from runhelpers import tiny_run_overrides, use_tool_calling_generator

from agentrl.config import ConfigError, build_config
from agentrl.train import loop, train


def test_dpo_steps_train_on_the_groups_pairs(tiny_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    run = tmp_path / "dpo"
    overrides = [*tiny_run_overrides(tiny_dir, run), "rollout.max_total_tokens=560",
                 "rollout.group_size=4", "rollout.groups_per_step=2", "train.steps=4",
                 "algo.name=dpo", "algo.dpo.beta=0.5", "algo.epochs=2"]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "load_generator", loop.load_generator)
        use_tool_calling_generator(loop)
        train(build_config({}, overrides), progress=False)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    pairs = [m["loss/dpo_pairs"] for m in lines]
    assert sum(pairs) >= 1  # some group had a better and a worse episode
    for m in lines:
        # minibatches=2 updates per epoch when there are 2 pairs, 1 for one, none without
        assert m["policy/updates"] == {0.0: 0.0, 1.0: 2.0, 2.0: 4.0}[m["loss/dpo_pairs"]]
    first = next(m for m in lines if m["loss/dpo_pairs"] > 0)
    assert first["loss/dpo_accuracy"] >= 0.0 and first["loss/total"] > 0
    start = AutoModelForCausalLM.from_pretrained(tiny_dir).state_dict()
    end = AutoModelForCausalLM.from_pretrained(run / "model").state_dict()
    assert max(float((start[k] - end[k]).abs().max()) for k in start) > 1e-4


def test_dpo_refuses_episodes_in_several_contexts_and_bad_beta():
    with pytest.raises(ConfigError, match="algo.dpo.beta"):
        build_config({}, ["algo.name=dpo", "algo.dpo.beta=0"])
    from agentrl.train.step import update_policy

    cfg = build_config({}, ["algo.name=dpo"])
    with pytest.raises(ValueError, match="algo.name: dpo does not train episodes"):
        update_policy(cfg, None, None, None, None, [object()], None, None, None, None, None,
                      torch.tensor([0, 0]))  # fmt: skip
