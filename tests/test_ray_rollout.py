"""Rollout in Ray actors (``rollout.backend: ray``, agentrl.train.ray_rollout) on a local Ray
cluster with 2 workers: the same episodes and learning as in one process, and a worker killed
mid-step is replaced and its share played again (or, if it dies twice, masked as harness
faults), never scored as failures. Episodes call tools (``runhelpers.ToolCallingGenerator``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from runhelpers import tiny_run_overrides, use_tool_calling_generator

from agentrl.config import build_config
from agentrl.rollout import EpisodeSpec
from agentrl.train import loop, train
from agentrl.train.ray_rollout import share_by_group

ray = pytest.importorskip("ray")
PLUGIN = Path(__file__).resolve().parent / "plugins" / "crashing_env.py"
STEPS = 3


@pytest.fixture(scope="module", autouse=True)
def local_cluster():
    """One local Ray cluster for the module (started by the first run), shut down after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    ray.shutdown()


def test_shares_keep_groups_whole_and_in_order():
    specs = [EpisodeSpec(s, 1, g) for g, s in enumerate([5, 6, 7]) for _ in range(2)]
    assert share_by_group(specs, 2) == [(0, 4), (4, 6)]  # 2 groups, then 1
    assert share_by_group(specs, 4) == [(0, 2), (2, 4), (4, 6), (6, 6)]  # one idle worker
    assert share_by_group(specs[:2], 1) == [(0, 2)]


def _overrides(tiny_dir: Path, run: Path, extra: list[str]) -> list[str]:
    return [*tiny_run_overrides(tiny_dir, run), "rollout.max_total_tokens=560",
            "rollout.group_size=4", "rollout.groups_per_step=2", f"train.steps={STEPS}",
            "algo.name=grpo", f"task.imports=[{PLUGIN}]", *extra]  # fmt: skip


def _train(tiny_dir: Path, run: Path, extra: list[str]) -> list[dict]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "load_generator", loop.load_generator)
        use_tool_calling_generator(loop)
        train(build_config({}, _overrides(tiny_dir, run, extra)), progress=False)
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _episodes(run: Path) -> list[tuple]:
    lines = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    return [(t["step"], t["group_id"], t["reward"]["total"], len(t["tool_calls"]),
             t["termination"]) for t in lines]  # fmt: skip


@pytest.fixture(scope="module")
def local_and_ray(tiny_dir, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ray")
    _train(tiny_dir, root / "local", [])
    _train(tiny_dir, root / "ray", ["rollout.backend=ray", "rollout.workers=2"])
    return root / "local", root / "ray"


def test_two_ray_workers_play_the_same_episodes_and_learn_the_same(local_and_ray, tiny_dir):
    from transformers import AutoModelForCausalLM

    local, ray_run = local_and_ray
    assert _episodes(ray_run) == _episodes(local)  # every step, group, reward, call and ending
    assert sum(e[3] for e in _episodes(local)) >= 1  # tool calls: the rewards differ
    lines = [json.loads(x) for x in (ray_run / "metrics.jsonl").read_text().splitlines()]
    assert [m["rollout/staleness"] for m in lines] == [0.0] * STEPS
    assert [m["rollout/worker_restarts"] for m in lines] == [0.0] * STEPS
    load = lambda d: AutoModelForCausalLM.from_pretrained(d).state_dict()  # noqa: E731
    start, a, b = load(tiny_dir), load(local / "model"), load(ray_run / "model")
    norm = lambda parts: sum(float((x**2).sum()) for x in parts) ** 0.5  # noqa: E731
    moved = norm(a[k] - start[k] for k in a)  # L2 over all weights
    apart = norm(a[k] - b[k] for k in a)
    assert moved > 0.1  # RL changed the weights ...
    # ... and both runs the same way: the Ray run's ratios start from recomputed log-probs,
    # whose rounding Adam magnifies only where a gradient is near zero (measured: apart is
    # 0.05-0.12% of moved; the largest single weights can differ by a third of the largest move)
    assert apart < moved / 50


def test_a_worker_killed_mid_step_is_replaced_and_its_share_replayed(local_and_ray, tiny_dir,
                                                                     tmp_path):  # fmt: skip
    flag = tmp_path / "crashed"
    run = tmp_path / "crash_once"
    extra = ["rollout.backend=ray", "rollout.workers=2", "task.env=weather_crash_once",
             f"task.env_kwargs={{flag: {flag}}}"]  # fmt: skip
    lines = _train(tiny_dir, run, extra)
    assert flag.exists()  # a worker process did die
    assert lines[0]["rollout/worker_restarts"] == 1.0
    assert lines[-1]["rollout/worker_restarts"] == 1.0  # one replacement, no more
    assert _episodes(run) == _episodes(local_and_ray[1])  # replayed from the same seeds


def test_a_worker_that_dies_twice_leaves_harness_faults_not_failures(tiny_dir, tmp_path):
    run = tmp_path / "crash_always"
    extra = ["rollout.backend=ray", "rollout.workers=2", "train.steps=1",
             "task.env=weather_crash_always",
             f"task.env_kwargs={{flag: {tmp_path / 'f'}}}"]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "load_generator", loop.load_generator)
        use_tool_calling_generator(loop)
        cfg = build_config({}, [*_overrides(tiny_dir, run, extra)])
        train(cfg, progress=False)
    m = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    ends = [e[4] for e in _episodes(run)]
    # episodes that end before any env step (a stop token at once) survive; the rest fault
    assert ends.count("harness_error") >= 1
    assert m["rollout/worker_restarts"] >= 2.0
    faults = round(m["termination/harness_error"] * m["rollout/episodes"])
    assert faults == ends.count("harness_error")
    assert m["rollout/valid_fraction"] == 1 - faults / len(ends)  # masked from the update


def test_a_worker_that_cannot_start_is_an_error_not_a_crash():
    from agentrl.train.ray_rollout import _raise_if_it_cannot_start

    class InitFailed(Exception):
        actor_init_failed = True

    with pytest.raises(RuntimeError, match="rollout worker 1 could not start"):
        _raise_if_it_cannot_start(1, InitFailed("boom in __init__"))
    _raise_if_it_cannot_start(1, Exception("the process died"))  # a crash: replaced instead
