"""arith_code (ToRL): reference episodes run end to end through the rollout, the env and the
guard into the sandbox; a worker that dies ends its episode ``harness_error``, which is
masked from the loss and from the group baseline."""

from __future__ import annotations

import os
import random

import pytest

import agentrl.envs as envs
from agentrl.algos.batch import build_batch
from agentrl.algos.grpo import compute_advantages
from agentrl.chat.render import stop_token_ids, tokenize
from agentrl.envs.reference import format_call
from agentrl.envs.tasks.arith import ArithFamily, last_integer
from agentrl.policy.generate import Sample
from agentrl.rollout import EpisodeSpec, run_episodes
from agentrl.sandbox import SandboxLimits, bwrap_status
from agentrl.sandbox.tool import RunPython
from agentrl.tools.registry import tool_from_schema
from agentrl.types import ToolCall

BWRAP_OK, BWRAP_REASON = bwrap_status()
needs_bwrap = pytest.mark.skipif(not BWRAP_OK, reason=f"bwrap cannot run here: {BWRAP_REASON}")


@pytest.fixture(scope="module")
def tokenizer():
    from agentrl.tiny.builder import corpus_texts, train_tokenizer

    return train_tokenizer(corpus_texts(60, 0))


class ReferenceGenerator:
    """Plays each episode's reference action (or a scripted override) as sampled tokens."""

    def __init__(self, tokenizer, made: list, override: dict[int, list[str]] | None = None):
        self.tokenizer, self.made, self.override = tokenizer, made, override or {}
        self.stop = stop_token_ids(tokenizer)[0]
        self.index: dict[int, int] = {}

    def generate(self, prompts, **kwargs):
        if not self.index:  # first turn: prompts come in spec order, as the envs were made
            self.index = {id(p): i for i, p in enumerate(prompts)}
        out = []
        for p in prompts:
            i = self.index[id(p)]
            script = self.override.get(i)
            text = script.pop(0) if script else None  # None: the reference action
            text = self.made[i].reference_action() if text is None else text
            ids = tokenize(self.tokenizer, text) + [self.stop]
            out.append(Sample(ids, [-0.1] * len(ids), True))
        return out


def test_verifier_and_levels():
    assert last_integer("It is 1,234,567.") == 1234567
    assert last_integer("2 + 2 = 4") == 4 and last_integer("none") is None
    fam = ArithFamily(sandbox_mode="unsafe")
    for level in (1, 2, 3):
        inst = fam.sample(random.Random(level), level)
        assert inst.expected_calls[0].name == "run_python"
        assert fam.check_answer(inst, f"The answer is {inst.data['answer']}.")
        assert not fam.check_answer(inst, f"The answer is {inst.data['answer'] + 1}.")
    with pytest.raises(ValueError, match=r"level 4 is not one of 'arith_code''s levels \[1, 2"):
        envs.ToolTaskEnv(fam).reset(seed=0, options={"level": 4})  # reset checks, not sample


@needs_bwrap
def test_reference_episodes_end_to_end_through_the_sandbox(tokenizer):
    made: list = []

    def make_env():
        made.append(envs.make("arith_code"))
        return made[-1]

    specs = [EpisodeSpec(seed=s, level=1 + s % 3, group_id=s // 3) for s in range(6)]
    trajs = run_episodes(ReferenceGenerator(tokenizer, made), make_env, specs)
    assert [t.termination for t in trajs] == ["success"] * 6
    for t, env in zip(trajs, made, strict=True):
        assert env.concurrent_steps  # run_python runs in worker processes: steps overlap
        (call,) = t.tool_calls
        assert call["name"] == "run_python" and call["ok"]
        assert call["content"] == (
            f'{{"stdout": "{env.instance.data["answer"]}\\n", "stderr": "", "exit_code": 0}}'
        )
        assert t.reward.layers["completion"] == 1.0 and t.info["turns"] == 2


def crashing_python_factory():
    """A nested function, so cloudpickle sends it by value (the worker need not import
    this test module, torch and all)."""

    def crashing_python(code: str) -> dict:
        """run_python, except that the program "CRASH" kills the tool's worker process."""
        if code == "CRASH":
            os._exit(3)
        return RunPython(SandboxLimits(timeout_s=5.0))(code)

    return crashing_python


CRASHING_PYTHON = crashing_python_factory()


class CrashyArith(ArithFamily):
    def tools(self, instance):
        real = super().tools(instance)[0]
        return [tool_from_schema("run_python", real.description, real.parameters,
                                 CRASHING_PYTHON, real.policy)]  # fmt: skip


@needs_bwrap
def test_a_dead_worker_ends_the_episode_harness_error_masked_from_loss_and_baseline(tokenizer):
    made: list = []

    def make_env():
        made.append(envs.ToolTaskEnv(CrashyArith(), max_turns=4))
        return made[-1]

    crash = format_call(ToolCall("run_python", {"code": "CRASH"}))
    specs = [EpisodeSpec(seed=7, level=1, group_id=0) for _ in range(3)]
    gen = ReferenceGenerator(tokenizer, made, {1: [None, "The answer is 0."], 2: [crash]})
    trajs = run_episodes(gen, make_env, specs)
    assert [t.termination for t in trajs] == ["success", "failure", "harness_error"]
    assert trajs[2].tool_calls[0]["error_code"] == "worker_crash"
    for estimator in ("grpo", "rloo"):
        adv, valid = compute_advantages(trajs, "mask", True, estimator)
        assert valid.tolist() == [True, True, False]
        assert adv[2] == 0.0
        if estimator == "grpo":  # baseline over the two valid episodes only: +-1 after scaling
            assert adv[:2].tolist() == pytest.approx([1.0, -1.0], abs=1e-4)
    batch = build_batch(trajs, valid, tokenizer.pad_token_id)
    assert batch.mask[2].sum() == 0 and batch.mask[0].sum() > 0
