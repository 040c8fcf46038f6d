"""train.warmstart_batch_size: demonstrations per warm-start SFT step."""

import torch
from rich.console import Console

import agentrl.train.build as build
from agentrl.config import build_config
from agentrl.train.build import env_factory


def _captured_sft_kwargs(monkeypatch, overrides: list[str]) -> dict:
    seen: dict = {}

    def fake_sft(model, tok, demos, **kwargs):
        seen.update(kwargs, demos=len(demos))

    monkeypatch.setattr(build, "sft_train", fake_sft)
    cfg = build_config({}, ["task.env=weather", "train.warmstart_demos=6", *overrides])
    build.warm_start(cfg, torch.nn.Linear(1, 1), None, env_factory(cfg), Console(), False)
    return seen


def test_the_warm_start_batch_size_reaches_the_sft_loop(monkeypatch):
    assert _captured_sft_kwargs(monkeypatch, [])["batch_size"] == 8  # the default, as before
    seen = _captured_sft_kwargs(monkeypatch, ["train.warmstart_batch_size=2"])
    assert seen["batch_size"] == 2 and seen["demos"] == 6
