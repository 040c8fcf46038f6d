"""``agentrl train --agent``: agent programs written with the official ``openai`` client,
trained unchanged through the trainer's own recording server on the tiny model: the example
end to end through the CLI, an update that changes the weights with crashed programs masked as
harness faults, token-exact episodes, and a server that decodes the updated weights."""

import copy
import json
import sys
from pathlib import Path

import pytest
import torch
from runhelpers import tiny_run_overrides

pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from agentrl.chat.render import stop_token_ids  # noqa: E402
from agentrl.config import build_config  # noqa: E402
from agentrl.engine.decoder import Engine  # noqa: E402
from agentrl.rollout import EpisodeSpec  # noqa: E402
from agentrl.train import train  # noqa: E402
from agentrl.train.agent import AgentCollector, AgentProgram  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = f"{sys.executable} {ROOT / 'examples' / 'openai_agent.py'}"
SCORED = f"{sys.executable} {ROOT / 'tests' / 'agent_programs' / 'scored_agent.py'}"


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _check_token_exact(run: Path, trajs: list[dict]) -> None:
    """Every episode's trained tokens are its recorded sampled ids, and a continued request's
    prompt is the previous request's ids plus a delta."""
    records = _lines(run / "agent_records" / "records.jsonl")
    by_session: dict[str, list[dict]] = {}
    for r in records:
        by_session.setdefault(r["session"], []).append(r)
    for t in trajs:
        own = by_session.get(t["info"]["session"], [])
        assert t["num_policy_tokens"] == sum(sum(r["loss_mask"]) for r in own) or t[
            "termination"] == "harness_error"  # fmt: skip
        for prev, rec in zip(own, own[1:], strict=False):
            if rec["continued"]:
                assert rec["token_ids"][: len(prev["token_ids"])] == prev["token_ids"]


def test_train_agent_runs_the_example_through_the_cli(tiny_dir, tmp_path):
    from typer.testing import CliRunner

    from agentrl.cli import app

    run = tmp_path / "run"
    config = tmp_path / "c.yaml"
    config.write_text("train:\n  steps: 1\n")
    sets = [x for o in tiny_run_overrides(tiny_dir, run) for x in ("--set", o)]
    result = CliRunner().invoke(app, ["train", str(config), *sets, "--set",
                                      "rollout.max_new_tokens=16", "--quiet", "--agent",
                                      EXAMPLE, "--agent-parallel", "2"])  # fmt: skip
    assert result.exit_code == 0, result.output
    (m,) = _lines(run / "metrics.jsonl")
    assert m["agent/harness_faults"] == 0 and m["rollout/episodes"] == 2
    trajs = _lines(run / "trajectories.jsonl")
    assert {t["termination"] for t in trajs} <= {"success", "failure"}
    assert all(t["reward"]["layers"] == {"program": float(t["success"])} for t in trajs)
    _check_token_exact(run, trajs)
    rewards = _lines(run / "agent_records" / "rewards.jsonl")
    assert {r["session"] for r in rewards} == {t["info"]["session"] for t in trajs}


def test_train_agent_trains_segments_and_masks_crashed_programs(tiny_dir, tmp_path, capfd,
                                                                monkeypatch):  # fmt: skip
    from agentrl.policy.loading import load_policy

    monkeypatch.setenv("AGENTRL_TEST_CRASH_GROUP", "1")
    monkeypatch.setenv("AGENTRL_TEST_REWRITE", "1")
    run = tmp_path / "run"
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, run), "train.steps=1",
                            "rollout.groups_per_step=2", "rollout.group_size=3",
                            "rollout.max_new_tokens=12", "algo.minibatches=1"])  # fmt: skip
    train(cfg, progress=False, agent=AgentProgram(SCORED, parallel=6, timeout_s=120))
    (m,) = _lines(run / "metrics.jsonl")
    assert m["agent/harness_faults"] == 3 and m["rollout/valid_fraction"] == 0.5
    trajs = _lines(run / "trajectories.jsonl")
    crashed = [t for t in trajs if t["group_id"] == 1]
    assert {t["termination"] for t in crashed} == {"harness_error"}
    assert all("boom" in t["info"]["stderr_tail"] for t in crashed)
    assert all("status 3" in t["info"]["harness_error"] for t in crashed)
    assert "harness fault" in capfd.readouterr().err
    played = [t for t in trajs if t["group_id"] == 0]
    assert all(t["info"]["requests"] == 2 for t in played)
    # the rewritten history: two token-exact segments per episode, both trained
    assert all(t["num_segments"] == 2 and t["info"]["continued"] == 0 for t in played)
    assert m["rollout/policy_tokens"] == sum(t["num_policy_tokens"] for t in trajs)
    assert len({t["reward"]["total"] for t in played}) > 1  # a spread: a real GRPO signal
    _check_token_exact(run, trajs)
    before, _ = load_policy(str(tiny_dir))
    after, _ = load_policy(str(run / "model"))
    changed = [n for (n, p), (_, q) in zip(before.named_parameters(), after.named_parameters(),
                                           strict=True) if not torch.equal(p, q)]  # fmt: skip
    assert changed


def test_the_server_decodes_the_weights_after_an_update(tiny_policy, tmp_path):
    """Greedy episodes before and after an in-place weight change: the second step's recorded
    ids and log-probs are the changed model's own (``Engine.generate`` on the same prompt)."""
    model, tok = tiny_policy
    model = copy.deepcopy(model)  # the fixture is shared: change a copy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    cfg = build_config({}, ["rollout.max_new_tokens=8", "rollout.max_total_tokens=480"])
    from agentrl.envs import make

    collector = AgentCollector(AgentProgram(SCORED, parallel=2), engine,
                               lambda env_id=None: make("weather"), cfg.rollout, tmp_path,
                               log=lambda _m: None)  # fmt: skip
    specs = [EpisodeSpec(seed=5, level=1, group_id=0)]
    try:
        first, _ = collector.play(specs, (True, 1.0, 1.0))
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        second, _ = collector.play(specs, (True, 1.0, 1.0))
    finally:
        collector.close()
    assert not first[0].is_harness_fault and not second[0].is_harness_fault
    records = _lines(tmp_path / "records.jsonl")
    assert {r["version"] for r in records} == {0, 1}
    old = [r for r in records if r["version"] == 0][0]
    new = [r for r in records if r["version"] == 1][0]
    assert old["token_ids"][: old["prompt_len"]] == new["token_ids"][: new["prompt_len"]]
    (want,) = engine.generate([new["token_ids"][: new["prompt_len"]]], max_new_tokens=8,
                              greedy=True)  # fmt: skip
    assert new["token_ids"][new["prompt_len"] :] == want.ids
    assert new["logprobs"][new["prompt_len"] :] == pytest.approx(want.logprobs, abs=1e-4)
    assert new["logprobs"][new["prompt_len"] :] != pytest.approx(
        old["logprobs"][old["prompt_len"] :], abs=1e-4
    )


def test_held_out_evaluation_runs_through_the_program_greedily(tiny_dir, tmp_path, monkeypatch):
    """A ``train --agent`` run's held-out evaluations are also played by the program, on the
    same seeds, decoded greedily: its success (harness faults left out) is in eval.jsonl and
    summary.json, its episodes in eval_<when>_program.jsonl."""
    monkeypatch.setenv("AGENTRL_TEST_CRASH_GROUP", "1")  # held-out episode 1 crashes
    run = tmp_path / "run"
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, run), "train.steps=1",
                            "train.eval_episodes=4", "train.general_check=false",
                            "rollout.max_new_tokens=8"])  # fmt: skip
    summary = train(cfg, progress=False, agent=AgentProgram(SCORED, parallel=4))
    points = _lines(run / "eval.jsonl")
    assert [p["step"] for p in points] == [0, 1]
    for when, point in zip(("before", "after"), points, strict=True):
        program = point["program"]
        assert program["harness_faults"] == 1 and program["episodes"] == 3
        played = _lines(run / f"eval_{when}_program.jsonl")
        own = _lines(run / f"eval_{when}.jsonl")
        assert [t["task_id"] for t in played] == [t["task_id"] for t in own]
        scored = [t for t in played if t["termination"] != "harness_error"]
        assert program["success_rate"] == pytest.approx(sum(t["success"] for t in scored) / 3)
    assert summary["program_success_after"] == points[1]["program"]["success_rate"]
    # the evaluation's requests were decoded greedily: every sampled token is the argmax
    records = _lines(run / "agent_records" / "records.jsonl")
    eval_sessions = {t["info"]["session"] for t in _lines(run / "eval_after_program.jsonl")}
    greedy = [r for r in records if r["session"] in eval_sessions]
    assert greedy and all(r["sampling"] == [True, 0.0, 1.0] for r in greedy)


def test_an_agent_program_with_rollout_memory_is_refused_by_name(tmp_path):
    cfg = build_config({}, [f"train.run_dir={tmp_path / 'run'}", "rollout.memory.enabled=true"])
    with pytest.raises(ValueError, match="rollout.memory"):
        train(cfg, progress=False, agent=AgentProgram(SCORED))
