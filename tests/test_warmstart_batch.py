"""train.warmstart_batch_size: demonstrations per warm-start SFT step."""

import torch
from rich.console import Console

import agentrl.train.build as build
from agentrl.config import build_config
from agentrl.sft import train_rows
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


class _Tok:
    pad_token_id = 0


def test_smaller_batches_take_more_steps_over_the_same_rows():
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5))

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def get_output_embeddings(self):
            return model[1]

        def forward(self, input_ids, attention_mask):
            return type("O", (), {"logits": self.inner(input_ids)})()

    rows = [([1, 2, 3, 4], [0, 1, 1, 1])] * 6
    kw = {"epochs": 2, "lr": 1e-2, "progress": False}
    assert train_rows(Wrapped(), _Tok(), rows, batch_size=8, **kw)["steps"] == 2
    assert train_rows(Wrapped(), _Tok(), rows, batch_size=2, **kw)["steps"] == 6
