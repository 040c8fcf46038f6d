"""Token-exact logs: a record round-trips every token field (segments and odd contexts too),
old records are refused by file and line, and DPO pairs come from logged episodes of one task
instance (agentrl.offline.logs, agentrl.offline.dpo)."""

import json

import numpy as np
import pytest

from agentrl.offline.dataset import prompt_tools
from agentrl.offline.dpo import log_pairs
from agentrl.offline.logs import LogError, load_logs
from agentrl.types import RewardBreakdown, Segment, Trajectory


def _traj(task="weather-L1-a", reward=1.0, term="success", prompt=(1, 2, 3), group=0,
          lps=(-0.123456789, -2.5, -0.00001234)) -> Trajectory:  # fmt: skip
    ids = [*prompt, 40, 41, 9, 9, 42]  # turn 0: 40 41; a tool delta 9 9; turn 1: 42
    mask = [0] * len(prompt) + [1, 1, 0, 0, 1]
    logprobs = [0.0] * len(prompt) + [lps[0], lps[1], 0.0, 0.0, lps[2]]
    turns = [-1] * len(prompt) + [0, 0, -1, -1, 1]
    r = RewardBreakdown({"completion": reward}, {"completion": 1.0}, [{"format": 1.0}, {}])
    return Trajectory(
        task,
        group,
        [{"role": "user", "content": "hi"}],
        ids,
        mask,
        logprobs,
        turns,
        r,
        term,
        2,
        [{"name": "f", "turn": 0}],
        {"seed": 7, "env_id": None},
    )


def _same(a: Trajectory, b: Trajectory) -> None:
    assert (b.token_ids, b.loss_mask, b.turn_of_token) == (a.token_ids, a.loss_mask,
                                                           a.turn_of_token)  # fmt: skip
    # float32 exact: the rollout's log-probs are float32 values
    assert np.array_equal(np.float32(b.logprobs), np.float32(a.logprobs))
    assert (b.task_id, b.group_id, b.level, b.termination) == (a.task_id, a.group_id, a.level,
                                                               a.termination)  # fmt: skip
    assert b.reward.to_dict() == a.reward.to_dict()
    assert (b.messages, b.tool_calls, b.info) == (a.messages, a.tool_calls, a.info)


def test_a_record_round_trips_token_exact_and_compactly():
    t = _traj()
    record = json.loads(json.dumps({"step": 3, **t.to_record()}))
    tokens = record["tokens"]
    assert tokens["mask_runs"] == [3, 2, 2, 1] and tokens["turns"] == [0, 1]
    assert len(tokens["logprobs"]) == 3  # sampled tokens only
    assert tokens["logprobs"][0] == -0.12345679  # the shortest float32 decimal
    _same(t, Trajectory.from_record(record))


def test_segments_and_contexts_off_the_contract_round_trip():
    seg0 = Segment([1, 2, 50], [0, 0, 1], [0.0, 0.0, -0.75], [-1, -1, 0], [{"role": "user"}])
    t = _traj()
    last = Segment(t.token_ids, t.loss_mask, t.logprobs, t.turn_of_token, t.messages)
    t.segments = [seg0, last]
    record = json.loads(json.dumps(t.to_record()))
    assert record["tokens"] == {"v": 1, "last_segment": True}  # the last segment's, not twice
    back = Trajectory.from_record(record)
    _same(t, back)
    assert [s.token_ids for s in back.segments] == [[1, 2, 50], t.token_ids]
    assert back.segments[0].messages == [{"role": "user"}]
    odd = _traj()
    odd.logprobs[0] = -0.5  # a log-prob on a prompt token: stored in full
    record = json.loads(json.dumps(odd.to_record()))
    assert record["tokens"]["full"] is True
    _same(odd, Trajectory.from_record(record))


def test_old_records_are_refused_naming_file_and_line(tmp_path):
    good = _traj().to_record()
    old = {k: v for k, v in good.items() if k != "tokens"}
    log = tmp_path / "trajectories.jsonl"
    log.write_text(json.dumps(good) + "\n" + json.dumps(old) + "\n")
    with pytest.raises(LogError, match=r"trajectories.jsonl:2: .*before agentrl wrote token"):
        load_logs([tmp_path])
    (tmp_path / "empty").mkdir()
    with pytest.raises(LogError, match="empty has no trajectories.jsonl"):
        load_logs([tmp_path / "empty"])
    log.write_text(json.dumps(good) + "\n")
    (ep,) = load_logs([tmp_path])
    assert (ep.line, ep.step) == (1, None)


def test_dpo_pairs_come_from_episodes_of_one_task_instance(tmp_path):
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    run_a.mkdir(), run_b.mkdir()
    a_ep = [_traj("A", 0.2, "failure"), _traj("A", 1.0), _traj("A", 5.0, "harness_error"),
            _traj("B", 1.0), _traj("C", 0.5, group=1)]  # fmt: skip
    b_ep = [_traj("C", 0.5, group=0), _traj("A", 0.0, "failure", prompt=(1, 2, 4)),
            _traj("D", 0.3, "failure"), _traj("A", 0.1, "max_turns")]  # fmt: skip
    for run, eps in ((run_a, a_ep), (run_b, b_ep)):
        lines = [json.dumps({"step": 0, **t.to_record()}) for t in eps]
        (run / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    trajs = [e.traj for e in load_logs([run_a, run_b])]
    # A (prompt 1 2 3): 1.0 over 0.1 (the max_turns episode of run b, the worst valid one; the
    # harness fault's 5.0 never counts); A with another prompt is another instance, alone;
    # B and D alone; C's two episodes tie
    assert log_pairs(trajs, 0.0) == [(1, 8)]
    assert log_pairs(trajs, 0.95) == []  # a gap of 0.9 is not more than 0.95
    assert log_pairs([], 0.0) == []


def test_the_tools_come_from_the_logged_prompt():
    schema = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    text = (
        "<|im_start|>system\nsignatures within <tools></tools> XML tags:\n<tools>\n"
        f"{json.dumps(schema)}\n{json.dumps(schema)}\n</tools>\n\nFor each call<|im_end|>"
    )
    assert prompt_tools(text) == [schema, schema]
    assert prompt_tools("no tools here") == [] and prompt_tools(None) == []
