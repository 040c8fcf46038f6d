"""Recorded sessions -> token-exact ``Trajectory`` records for training.

A session's completions are read in order. A completion whose prompt ids start with the ids of
a segment built so far (that segment's prompt, sampled ids and deltas: the usual agent loop,
which the server builds that way, ``agentrl.serve.record``) extends that segment: the new
prompt tokens with loss mask 0, the sampled ids with mask 1 and their rollout log-probs. Any
other completion (history rewritten, an ``n > 1`` sibling) starts a new segment. An episode of
one segment is a plain trajectory; one of several keeps them all in ``Trajectory.segments``,
each token-exact, every one trained with the episode's advantage (``agentrl.algos.segments``).
Nothing is re-tokenized: the ids are the recorded ones.

The reward is the one the program reported (layer ``program``); ``success`` defaults to
reward > 0. A session with no reward, or no completion, is a harness fault (masked from the
loss and the group baselines, never scored as a failure: DESIGN contract 3).
"""

from __future__ import annotations

from typing import Any

from agentrl.chat.parser import parse_action
from agentrl.types import RewardBreakdown, Segment, Trajectory

REWARD_LAYER = "program"


def _extend(seg: Segment, rec: dict[str, Any], turn: int) -> None:
    ids, start = rec["token_ids"], len(seg.token_ids)
    seg.token_ids.extend(ids[start:])
    seg.loss_mask.extend(rec["loss_mask"][start:])
    seg.logprobs.extend(rec["logprobs"][start:])
    seg.turn_of_token.extend(turn if m else -1 for m in rec["loss_mask"][start:])


def build_segments(records: list[dict[str, Any]]) -> list[Segment]:
    """The token-exact contexts of one session's records (in recording order)."""
    segments: list[Segment] = []
    for turn, rec in enumerate(records):
        prompt = rec["token_ids"][: rec["prompt_len"]]
        owner = next((s for s in reversed(segments)
                      if len(s.token_ids) <= len(prompt)
                      and prompt[: len(s.token_ids)] == s.token_ids), None)  # fmt: skip
        if owner is None:
            owner = Segment([], [], [], [], [])
            segments.append(owner)
        _extend(owner, rec, turn)
        owner.messages = [*rec["messages"], rec["reply"]]
    return segments


def _tool_calls(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    calls = []
    for rec in records:
        for call in rec["reply"].get("tool_calls") or []:
            fn = call.get("function", {})
            calls.append({"name": fn.get("name"), "arguments": fn.get("arguments"), "ok": True})
    return calls


def session_trajectory(records: list[dict[str, Any]], reward: dict[str, Any] | None, *,
                       task_id: str, group_id: int, level: int = 1,
                       info: dict[str, Any] | None = None) -> Trajectory:  # fmt: skip
    """One episode from a session's records and its reported reward (see the module doc)."""
    info = dict(info or {})
    segments = build_segments(records)
    fault = None
    if not records:
        fault = (
            "the program made no request in its session (send AGENTRL_SESSION as the "
            "X-Agentrl-Session header or the 'user' field)"
        )
    elif reward is None:
        fault = "the program did not report a reward"
    if fault is not None:
        info.setdefault("harness_error", fault)
        termination, value = "harness_error", 0.0
    else:
        value = float(reward["reward"])
        success = reward.get("success")
        success = value > 0 if success is None else bool(success)
        termination = "success" if success else "failure"
    last = segments[-1] if segments else Segment([], [], [], [], [])
    parse_errors = [e.code for rec in records for e in parse_action(rec.get("text", "")).errors]
    info.update(
        turns=len(records),
        parse_errors=parse_errors,
        requests=len(records),
        segments=len(segments),
        continued=sum(bool(r.get("continued")) for r in records),
    )
    return Trajectory(
        task_id=task_id, group_id=group_id, messages=list(last.messages),
        token_ids=list(last.token_ids), loss_mask=list(last.loss_mask),
        logprobs=list(last.logprobs), turn_of_token=list(last.turn_of_token),
        reward=RewardBreakdown({REWARD_LAYER: value}, {REWARD_LAYER: 1.0}),
        termination=termination, level=level, tool_calls=_tool_calls(records), info=info,
        segments=segments if len(segments) > 1 else [],
    )  # fmt: skip
