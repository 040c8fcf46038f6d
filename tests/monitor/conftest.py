"""A small real run of the tiny model whose logs the plot and viewer tests read: 3 steps of 2
groups of 2, an evaluation before and after, episodes that call tools (through
``runhelpers.ToolCallingGenerator``: the tiny model never writes a parsable call itself)."""

import pytest
from runhelpers import ToolCallingGenerator, tiny_run_overrides

from agentrl.config import build_config
from agentrl.train import loop, train


@pytest.fixture(scope="session")
def logged_run(tiny_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("logged") / "run"
    real = loop.load_generator

    def load(cfg):
        model, tok, generator, device = real(cfg)
        return model, tok, ToolCallingGenerator(generator), device

    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, run), "train.steps=3",
                            "rollout.groups_per_step=2", "task.max_turns=3",
                            "train.eval_episodes=2", "train.eval_levels=[1]",
                            "train.general_check=false", "train.save_model=false"])  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "load_generator", load)
        train(cfg, progress=False)
    return run
