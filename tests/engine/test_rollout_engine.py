"""The rollout on the engine: an episode whose tool is slow does not hold the others (they
keep decoding and finish while it waits), and trajectories keep the token-in/token-out
contract with the engine's recorded log-probs."""

from __future__ import annotations

import threading
import time

import torch

from agentrl.algos.batch import build_batch
from agentrl.algos.forward import forward_logprobs
from agentrl.chat.render import stop_token_ids
from agentrl.engine.decoder import Engine
from agentrl.envs import make
from agentrl.rollout import EpisodeSpec, run_episodes
from agentrl.types import RewardBreakdown

TURNS = 3


class SlowToolEnv:
    """Three turns, each answered by a tool-response message; the episode with seed 0 waits
    ``delay`` seconds in every step (a slow tool). Steps may overlap (worker-process tools)."""

    concurrent_steps = True
    tool_schemas: list = []

    def __init__(self, log: list, delay: float):
        self.log, self.delay, self.lock = log, delay, threading.Lock()

    def reset(self, seed, options=None):
        self.seed, self.turn = seed, 0
        self.messages = [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": f"Task number {seed}."}]  # fmt: skip
        return list(self.messages), {"task_id": str(seed)}

    def step(self, text):
        if self.seed == 0:
            time.sleep(self.delay)
        self.log.append((self.seed, self.turn, time.perf_counter()))
        self.messages.append({"role": "assistant", "content": text})
        self.turn += 1
        if self.turn == TURNS:
            return [], 1.0, True, False, {"termination": "success", "reward": self.finish("")}
        obs = [{"role": "tool", "content": f'{{"result": {self.turn}}}'}]
        self.messages += obs
        return obs, 0.0, False, False, {}

    def finish(self, termination):
        return RewardBreakdown({"completion": 1.0}, {"completion": 1.0})


def test_a_slow_tool_does_not_hold_the_batch(tiny_policy):
    model, tok = tiny_policy
    vocab = len(tok)
    engine = Engine(model, tok, list(range(vocab)), tok.pad_token_id)  # every id ends a turn
    log: list = []
    start = time.perf_counter()
    trajs = run_episodes(engine, lambda: SlowToolEnv(log, delay=1.0),
                         [EpisodeSpec(seed=s, level=1) for s in range(4)],
                         max_new_tokens=4, max_total_tokens=400)  # fmt: skip
    assert [t.termination for t in trajs] == ["success"] * 4
    assert [t.info["turns"] for t in trajs] == [TURNS] * 4
    slow_first_step = min(t for seed, turn, t in log if seed == 0)
    others_done = max(t for seed, turn, t in log if seed != 0 and turn == TURNS - 1)
    assert others_done < slow_first_step  # all their turns ran while the slow tool waited
    assert time.perf_counter() - start >= TURNS * 1.0


def test_engine_rollout_logprobs_equal_the_trainers_forward(tiny_policy):
    model, tok = tiny_policy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id, slots=3)
    torch.manual_seed(3)
    trajs = run_episodes(engine, lambda: make("weather", fault_rate=0.0, max_turns=3),
                         [EpisodeSpec(seed=s, level=1 + s % 3) for s in range(6)],
                         max_new_tokens=24, max_total_tokens=700, temperature=0.8)  # fmt: skip
    assert sum(t.info["turns"] for t in trajs) > len(trajs)  # some episodes had several turns
    batch = build_batch(trajs, torch.ones(len(trajs), dtype=torch.bool), tok.pad_token_id)
    with torch.no_grad():
        fresh, _ = forward_logprobs(model, batch, 0.8)
    in_loss = batch.mask.bool()
    assert in_loss.sum() > 0
    assert torch.allclose(fresh[in_loss], batch.old_logp[in_loss], atol=1e-4)
