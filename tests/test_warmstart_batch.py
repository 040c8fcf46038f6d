"""train.warmstart_batch_size (demonstrations per warm-start SFT step) and
train.warmstart_from (another run's saved warm start instead of SFT)."""

import pytest
import torch
from rich.console import Console

import agentrl.train.build as build
from agentrl.config import build_config
from agentrl.train.build import env_factory


def _captured_sft_kwargs(monkeypatch, overrides: list[str], steps: int = 6) -> dict:
    """What warm_start passed to SFT (which took ``steps`` of 6), and what it printed."""
    seen: dict = {}

    def fake_sft(model, tok, demos, **kwargs):
        seen.update(kwargs, demos=len(demos))
        return {"steps": steps, "planned_steps": 6, "final_loss": 0.0432, "tokens": 100}

    monkeypatch.setattr(build, "sft_train", fake_sft)
    cfg = build_config({}, ["task.env=weather", "train.warmstart_demos=6", *overrides])
    console = Console(record=True, width=200)
    build.warm_start(cfg, torch.nn.Linear(1, 1), None, env_factory(cfg), console, False)
    seen["printed"] = console.export_text()
    return seen


def test_the_warm_start_says_where_it_stopped(monkeypatch):
    printed = _captured_sft_kwargs(monkeypatch, [], steps=6)["printed"]
    assert "warm start: 6/6 steps, final loss 0.0432\n" in printed
    printed = _captured_sft_kwargs(monkeypatch, ["train.warmstart_stop_loss=0.05"], 2)["printed"]
    assert (
        "warm start: 2/6 steps, final loss 0.0432 (stopped early: train.warmstart_stop_loss"
        in printed
    )


def test_the_warm_start_batch_size_reaches_the_sft_loop(monkeypatch):
    assert _captured_sft_kwargs(monkeypatch, [])["batch_size"] == 8  # the default, as before
    seen = _captured_sft_kwargs(monkeypatch, ["train.warmstart_batch_size=2"])
    assert seen["batch_size"] == 2 and seen["demos"] == 6
    assert seen["stop_loss"] is None  # the default: all epochs
    seen = _captured_sft_kwargs(monkeypatch, ["train.warmstart_stop_loss=0.05"])
    assert seen["stop_loss"] == 0.05


def test_a_saved_warm_start_is_loaded_instead_of_sft(monkeypatch, tmp_path, tiny_dir):
    from agentrl.checkpoint import START_FILE
    from agentrl.policy.loading import load_policy

    saved, tok = load_policy(str(tiny_dir))
    with torch.no_grad():
        saved.lm_head.weight.add_(0.5)  # weights no fresh load has
    (tmp_path / "ws" / "checkpoints").mkdir(parents=True)
    torch.save(saved.state_dict(), tmp_path / "ws" / "checkpoints" / START_FILE)

    def no_sft(*_args, **_kwargs):
        raise AssertionError("SFT ran though the run starts from a saved warm start")

    monkeypatch.setattr(build, "sft_train", no_sft)
    model, _ = load_policy(str(tiny_dir))
    assert not torch.equal(model.lm_head.weight, saved.lm_head.weight)
    cfg = build_config({}, ["task.env=weather", f"train.warmstart_from={tmp_path / 'ws'}"])
    build.warm_start(cfg, model, tok, env_factory(cfg), Console(), False)
    for name, value in saved.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    cfg = build_config({}, ["task.env=weather", f"train.warmstart_from={tmp_path / 'none'}"])
    missing = "train.warmstart_from needs a run directory with .*rl_start.pt; not found"
    with pytest.raises(FileNotFoundError, match=missing):
        build.warm_start(cfg, model, tok, env_factory(cfg), Console(), False)
