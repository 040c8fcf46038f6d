"""Config overrides and helpers shared by the tests that train the tiny fixture model for a few
steps (and kill some of them)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def replayable_metrics(run: Path) -> list[dict]:
    """A run's metrics.jsonl lines without what the machine measures (seconds, rates, the
    process's memory): what a resumed run must reproduce exactly."""
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    measured = ("time/", "system/")
    return [
        {k: v for k, v in m.items() if not k.startswith(measured) and not k.endswith("_per_s")}
        for m in lines
    ]


def assistant_turns(ids: list[int], mask: list[int]) -> list[list[int]]:
    """The runs of loss-mask 1 of an episode: each assistant turn's ids, its stop included."""
    turns, current = [], []
    for t, m in zip(ids, mask, strict=True):
        if m:
            current.append(t)
        elif current:
            turns.append(current)
            current = []
    return turns + ([current] if current else [])


def tiny_run_overrides(tiny_dir: Path, run: Path) -> list[str]:
    """The smallest weather run: no warm start or evaluation, one group of 2, short turns.

    ``max_total_tokens`` leaves room after the weather prompt (~400 tokens with the tiny
    tokenizer) for a few generated tokens.
    """
    return [
        f"model.name={tiny_dir}",
        f"train.run_dir={run}",
        "train.eval_episodes=0",
        "train.warmstart_demos=0",
        "task.max_turns=2",
        "rollout.group_size=2",
        "rollout.groups_per_step=1",
        "rollout.max_new_tokens=6",
        "rollout.max_total_tokens=480",
    ]


class ToolCallingGenerator:
    """The real generator, except that a first turn whose first sampled id is even becomes a
    ``get_weather`` call for the first city the prompt names.

    The fixture model never writes a parsable tool call on its own; this wrapper gives runs
    episodes that call tools while every token still comes from the real sampling path (the
    coin is the model's own sampled token, so it follows the weights and the RNG state). The
    forced call's log-probs are the model's own, from a forward pass, as a sampler's would be.
    """

    supports_sessions = False  # turn by turn through ``generate`` (the rollout's TurnSession)

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):  # tokenizer, stop_ids, device, ...
        if name == "inner":  # not set yet (unpickling in a Ray worker)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        if name == "inner":
            object.__setattr__(self, name, value)
        else:  # e.g. ``generator.model = policy``: the inner generator samples with it
            setattr(self.inner, name, value)

    def fork(self, model):
        """The same wrapper around the inner engine's fork (asynchronous rollout)."""
        return ToolCallingGenerator(self.inner.fork(model))

    def generate(self, prompts, **kwargs):
        import torch

        from agentrl.chat.render import tokenize
        from agentrl.envs.tasks.weather import CITIES
        from agentrl.policy.generate import Sample
        from agentrl.policy.logprobs import token_logprobs

        samples = self.inner.generate(prompts, **kwargs)
        tok, model = self.inner.tokenizer, self.inner.model
        out = []
        for prompt, sample in zip(prompts, samples, strict=True):
            text = tok.decode(prompt)
            first_turn = text.count("<|im_start|>assistant") == 1
            city = next((c for c in CITIES if c in text.split("<|im_start|>user")[-1]), None)
            if not (first_turn and city and sample.ids and sample.ids[0] % 2 == 0):
                out.append(sample)
                continue
            call = f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}'
            ids = tokenize(tok, call + "\n</tool_call>") + [self.inner.stop_ids[0]]
            with torch.no_grad():
                seq = torch.tensor([prompt + ids])  # (1, P + N)
                logits = model(input_ids=seq).logits[:, len(prompt) - 1 : -1]  # (1, N, V)
                temp = 1.0 if kwargs.get("greedy") else kwargs.get("temperature", 1.0)
                lps = token_logprobs(logits, torch.tensor([ids]), temp)[0].tolist()
            out.append(Sample(ids, lps, True))
        return out


def use_tool_calling_generator(module) -> None:
    """Wrap the generator ``module.load_generator`` (``agentrl.train.loop``) returns."""
    real = module.load_generator

    def load(cfg):
        model, tok, generator, device = real(cfg)
        return model, tok, ToolCallingGenerator(generator), device

    module.load_generator = load


# The killed run: stop at a chosen point and wait there to be killed.
KILLED_CHILD = """
import sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)
from agentrl.config import load_config
from agentrl import checkpoint
from agentrl.train import loop, train

cfg_path, mode, arg, flag, tests = sys.argv[1:6]
sys.path.insert(0, tests)
from runhelpers import use_tool_calling_generator
use_tool_calling_generator(loop)
cfg = load_config(cfg_path)

def park():
    Path(flag).write_text("parked")
    time.sleep(600)

if mode == "after_step":  # park once `arg` steps are done (their checkpoint included)
    hook = lambda n: park() if n == int(arg) else None
    train(cfg, progress=False, on_step=hook)
else:  # park half way through writing the checkpoint directory `arg`
    real = checkpoint._write_file
    def slow_write(path, obj):
        if path.parent.name == arg + ".tmp" and path.name == "optimizer.pt":
            path.write_bytes(b"partial")
            park()
        real(path, obj)
    checkpoint._write_file = slow_write
    train(cfg, progress=False)
"""


def run_and_kill(cfg_path: Path, mode: str, arg: str, flag: Path) -> None:
    """Train ``cfg_path`` in a child process, park it (``mode`` ``after_step``: once ``arg``
    steps are done; ``in_write``: half way through writing checkpoint ``arg``), SIGKILL it."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_CHILD,
            str(cfg_path),
            mode,
            arg,
            str(flag),
            str(Path(__file__).resolve().parent),
        ],
        env=env,
    )
    try:
        deadline = time.time() + 300
        while not flag.exists():
            assert proc.poll() is None, "the child exited before reaching the kill point"
            assert time.time() < deadline, "the child never reached the kill point"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
