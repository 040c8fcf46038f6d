"""Harness faults end to end, with no sandbox needed: a tool whose host is down (it raises
``HarnessFault``) ends its episode ``harness_error``; every critic-free estimator gives it no
advantage and leaves it out of the group baseline; its row carries no loss, so the update is
exactly the update without it; and ``algo.grpo.advantage`` picks the estimator in the loop."""

from __future__ import annotations

import copy
import random

import pytest
import torch

import agentrl.train.step as step_mod
from agentrl.algos.batch import build_batch
from agentrl.algos.grpo import ESTIMATORS, compute_advantages, grpo_update
from agentrl.chat.render import stop_token_ids, tokenize
from agentrl.config import build_config
from agentrl.envs.core import ToolTaskEnv
from agentrl.envs.tasks.weather import WeatherFamily
from agentrl.policy.generate import Sample
from agentrl.rollout import EpisodeSpec, run_episodes
from agentrl.tools.errors import HarnessFault
from agentrl.tools.registry import tool_from_schema
from agentrl.train.build import RLModels
from agentrl.train.step import StepSettings, update_policy


class HostDownWeather(WeatherFamily):
    """``get_weather``'s host is unreachable: every call is a harness fault."""

    def tools(self, instance):
        def host_down(**_kwargs):
            raise HarnessFault("weather service host unreachable")

        return [tool_from_schema(t.name, t.description, t.parameters, host_down, t.policy)
                if t.name == "get_weather" else t for t in super().tools(instance)]  # fmt: skip


class ScriptedGenerator:
    """Plays each episode's reference action, or a scripted text, as sampled tokens."""

    def __init__(self, tok, made: list, script: dict[int, list[str]]):
        self.tok, self.made, self.script = tok, made, script
        self.tokenizer = tok  # the rollout encodes prompts with it
        self.stop = stop_token_ids(tok)[0]
        self.index: dict[int, int] = {}

    def generate(self, prompts, **_kwargs):
        if not self.index:  # the first turn's prompts come in spec order
            self.index = {id(p): i for i, p in enumerate(prompts)}
        out = []
        for p in prompts:
            i = self.index[id(p)]
            lines = self.script.get(i)
            text = lines.pop(0) if lines else self.made[i].reference_action()
            ids = tokenize(self.tok, text) + [self.stop]
            out.append(Sample(ids, [-0.1] * len(ids), True))
        return out


@pytest.fixture(scope="module")
def episodes(tiny_policy):
    """One group: a success, a failure (a wrong answer) and a harness fault."""
    _, tok = tiny_policy
    made: list = []

    def make_env():
        family = HostDownWeather(fault_rate=0.0) if len(made) == 2 else WeatherFamily(0.0)
        made.append(ToolTaskEnv(family, max_turns=4))
        return made[-1]

    specs = [EpisodeSpec(seed=3, level=1, group_id=0)] * 3
    gen = ScriptedGenerator(tok, made, {1: ["I do not know the weather there."]})
    return run_episodes(gen, make_env, specs)


def test_a_harness_fault_ends_the_episode_and_no_estimator_counts_it(episodes):
    assert [t.termination for t in episodes] == ["success", "failure", "harness_error"]
    assert episodes[2].tool_calls[0]["error_code"] == "sandbox_error"
    for estimator in ESTIMATORS:
        adv, valid = compute_advantages(episodes, "zero", True, estimator)
        assert valid.tolist() == [True, True, False], estimator
        assert adv[2] == 0.0 and adv[0] > 0 > adv[1], estimator
    adv, _ = compute_advantages(episodes, "zero", True, "grpo")
    # the baseline is the mean of the two valid episodes only: +-1 after std scaling
    assert adv[:2].tolist() == pytest.approx([1.0, -1.0], abs=1e-4)


def test_the_faulty_row_has_no_loss_and_the_update_equals_the_update_without_it(
    tiny_policy, episodes
):
    model, tok = tiny_policy
    adv, valid = compute_advantages(episodes, "zero", True, "grpo")
    batch = build_batch(episodes, valid, tok.pad_token_id)
    assert batch.mask[2].sum() == 0 and batch.mask[0].sum() > 0
    without = build_batch(episodes[:2], valid[:2], tok.pad_token_id)
    results = []
    for b, a in ((batch, adv), (without, adv[:2])):
        m = copy.deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=1e-2)
        grpo_update(m, opt, b, a, clip_eps=0.2, kl_coef=0.0, loss_agg="token_mean", epochs=1,
                    minibatches=1, max_grad_norm=1e9, temperature=1.0,
                    rng=random.Random(0))  # fmt: skip
        results.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert not torch.equal(results[0], start)
    assert torch.allclose(results[0], results[1], atol=1e-6)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_the_configured_estimator_is_the_one_the_step_uses(
    tiny_policy, episodes, estimator, monkeypatch
):
    model, tok = tiny_policy
    seen = []

    def recording(trajs, truncation, scale, est, rewards):
        seen.append(est)
        return compute_advantages(trajs, truncation, scale, est, rewards)

    monkeypatch.setattr(step_mod, "compute_advantages", recording)
    cfg = build_config({}, [f"algo.grpo.advantage={estimator}", "algo.minibatches=1"])
    valid = torch.tensor([True, True, False])
    rewards = torch.tensor([t.reward.total for t in episodes])
    m = copy.deepcopy(model)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    s = StepSettings(lr=1e-3, kl_coef=0.0, entropy_coef=0.0, gamma=0.99, temperature=1.0)
    stats, _ = update_policy(cfg, s, RLModels(m, None, None), opt,
                             build_batch(episodes, valid, tok.pad_token_id), episodes, rewards,
                             valid, torch.zeros(3), random.Random(0), None)  # fmt: skip
    assert seen == [estimator] and stats["updates"] == 1.0
