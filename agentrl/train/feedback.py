"""Live human feedback (seed 000 §5): ratings and corrections of logged episodes, folded into
the next update.

A person reads ``trajectories.jsonl`` (or ``GET /episodes`` of the feedback endpoint) and
rates an episode by its ``episode_id``: a JSON file dropped in ``run_dir/feedback/`` (or
``POST /feedback``, which writes the same file), ``{"episode_id": "3-5", "rating": 0.8}``
with ratings in [-1, 1] (0 = no opinion), or ``{"episode_id": ..., "correction": "text"}``:
a preferred final answer.

What a rating does (one rule for GRPO, PPO and DPO, no change to their math): before each
update the trainer reads the new files; each rated episode's **group is replayed** in that
update as an extra group whose reward is the ``human`` layer alone (``train.feedback.weight``
x rating for the rated episodes, 0 for the group-mates nobody rated): its advantages carry
only what the person said (the task reward was trained on when the group was played). A
correction adds one more member to that group: the episode with its last assistant turn
replaced by the correction's tokens, rated 1. Replayed episodes are stale samples, trained
with the asynchronous rollout's off-policy correction (``agentrl.algos.offpolicy``: the ratio
against the current policy, truncated importance weights); the corrected turn's behaviour
policy is the person, a deterministic one, so its tokens' behaviour log-prob is 0 and their
importance weight is the policy's own probability of them. Each rating is used once.

Episodes stay replayable for ``train.feedback.keep_steps`` steps; a rating of an older or
unknown episode is dropped and counted. Pending ratings, the files already read and the
replayable episodes are in every checkpoint: a resumed run applies exactly the ratings the
killed run had not applied yet, and reads the files that came after its checkpoint.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentrl.config.feedback import FeedbackConfig
from agentrl.types import RewardBreakdown, Trajectory

LAYER = "human"
FEEDBACK_DIR = "feedback"


def episode_id(step: int, index: int) -> str:
    """The stable id of the ``index``-th episode of step ``step`` in ``trajectories.jsonl``."""
    return f"{step}-{index}"


def id_step(eid: str) -> int | None:
    head = eid.split("-", 1)[0]
    return int(head) if head.isdigit() else None


@dataclass(frozen=True)
class Feedback:
    """One rating or correction of a logged episode."""

    episode_id: str
    rating: float | None = None  # in [-1, 1]
    correction: str | None = None  # a preferred final answer
    posted_at: float = 0.0  # unix time it was given (latency is measured from here)


def parse_feedback(obj: Any, posted_at: float | None = None) -> Feedback:
    """A ``Feedback`` from a JSON object; a bad one raises ``ValueError`` naming the field."""
    if not isinstance(obj, dict):
        raise ValueError("feedback must be a JSON object with episode_id and rating or correction")
    eid = obj.get("episode_id")
    if not isinstance(eid, str) or id_step(eid) is None:
        raise ValueError(
            f"feedback field 'episode_id' must look like '<step>-<index>', got {eid!r}"
        )
    rating, correction = obj.get("rating"), obj.get("correction")
    if rating is None and correction is None:
        raise ValueError("feedback needs a field 'rating' (in [-1, 1]) or 'correction' (text)")
    if rating is not None:
        if isinstance(rating, bool) or not isinstance(rating, int | float):
            raise ValueError(f"feedback field 'rating' must be a number, got {rating!r}")
        if not -1.0 <= float(rating) <= 1.0:
            raise ValueError(f"feedback field 'rating' must be in [-1, 1], got {rating!r}")
    if correction is not None and (not isinstance(correction, str) or not correction.strip()):
        raise ValueError("feedback field 'correction' must be a non-empty string")
    when = obj.get("posted_at", posted_at if posted_at is not None else time.time())
    return Feedback(eid, None if rating is None else float(rating), correction, float(when))


def write_feedback(run_dir: str | Path, episode: str, rating: float | None = None,
                   correction: str | None = None) -> Path:  # fmt: skip
    """Drop one feedback file in ``run_dir/feedback`` atomically (the HTTP endpoint's path
    too); validated first, stamped with the time it was given."""
    body = {"episode_id": episode, "rating": rating, "correction": correction}
    body = {k: v for k, v in body.items() if v is not None}
    fb = parse_feedback(body)
    folder = Path(run_dir) / FEEDBACK_DIR
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
    tmp = folder / f".{name}.tmp"
    tmp.write_text(json.dumps({**body, "posted_at": fb.posted_at}))
    os.replace(tmp, folder / name)
    return folder / name


class FeedbackBook:
    """The trainer's side: reads feedback files, keeps recent episodes, builds replays."""

    def __init__(self, run_dir: str | Path, cfg: FeedbackConfig, encode=None) -> None:
        """``encode(text) -> ids`` of a final answer with its stop token (corrections)."""
        self.dir, self.cfg, self.encode = Path(run_dir) / FEEDBACK_DIR, cfg, encode
        self.dir.mkdir(parents=True, exist_ok=True)
        self.consumed: set[str] = set()  # feedback files already read
        self.pending: list[Feedback] = []
        self.episodes: dict[str, Trajectory] = {}  # replayable, by episode id
        self.lock = threading.Lock()  # the endpoint reads ``episodes`` from its thread

    def poll(self) -> tuple[int, int]:
        """Read the feedback files not read yet: (ratings received, files refused)."""
        received = invalid = 0
        for path in sorted(self.dir.glob("*.json")):
            if path.name in self.consumed:
                continue
            self.consumed.add(path.name)
            try:
                fb = parse_feedback(json.loads(path.read_text()), path.stat().st_mtime)
            except (ValueError, OSError):
                invalid += 1
                continue
            self.pending.append(fb)
            received += 1
        return received, invalid

    def remember(self, step: int, episodes: list[Trajectory]) -> None:
        """The step's episodes become rateable; those older than ``keep_steps`` are let go."""
        with self.lock:
            for k, t in enumerate(episodes):
                self.episodes[episode_id(step, k)] = t
            oldest = step - self.cfg.keep_steps + 1
            for eid in [e for e in self.episodes if (id_step(e) or 0) < oldest]:
                del self.episodes[eid]

    def replays(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """Read new feedback; the replayed groups of the pending ratings (each used once)."""
        received, invalid = self.poll()
        now, groups, applied, latency, dropped = time.time(), {}, 0, [], 0
        for fb in self.pending:
            if fb.episode_id not in self.episodes:
                dropped += 1  # unknown, or older than keep_steps
                continue
            key = (id_step(fb.episode_id), self.episodes[fb.episode_id].group_id)
            groups.setdefault(key, []).append(fb)
            applied += 1
            latency.append(now - fb.posted_at)
        self.pending = []
        out: list[Trajectory] = []
        for (s, _), fbs in groups.items():
            out += self._replay_group(s, fbs)
        m = {"feedback/received": float(received), "feedback/applied": float(applied),
             "feedback/dropped": float(dropped), "feedback/invalid": float(invalid),
             "feedback/replayed_episodes": float(len(out)),
             "feedback/latency_s": sum(latency) / len(latency) if latency else 0.0}  # fmt: skip
        return out, m

    def _replay_group(self, s: int, fbs: list[Feedback]) -> list[Trajectory]:
        gid = self.episodes[fbs[0].episode_id].group_id
        ratings = {fb.episode_id: fb.rating for fb in fbs if fb.rating is not None}
        members = [(e, t) for e, t in self.episodes.items()
                   if id_step(e) == s and t.group_id == gid]  # fmt: skip
        out = [self._human(t, ratings.get(e, 0.0), e) for e, t in members]
        for fb in fbs:
            if fb.correction is not None:
                fixed = self._corrected(self.episodes[fb.episode_id], fb.correction)
                if fixed is not None:
                    out.append(self._human(fixed, 1.0, fb.episode_id))
        return out

    def _human(self, t: Trajectory, rating: float, eid: str) -> Trajectory:
        reward = RewardBreakdown({LAYER: rating}, {LAYER: self.cfg.weight})
        return replace(t, reward=reward, info={**t.info, "replay_of": eid})

    def _corrected(self, t: Trajectory, text: str) -> Trajectory | None:
        """``t`` with its last assistant turn replaced by ``text`` (behaviour log-prob 0)."""
        if self.encode is None or t.segments or 1 not in t.loss_mask:
            return None
        end = len(t.loss_mask) - t.loss_mask[::-1].index(1)
        start = end
        while start > 0 and t.loss_mask[start - 1] == 1:
            start -= 1
        new = list(self.encode(text))
        turn = t.turn_of_token[start]
        last = max(i for i, m in enumerate(t.messages) if m.get("role") == "assistant")
        messages = [*t.messages[:last], {"role": "assistant", "content": text}]
        return replace(t, token_ids=t.token_ids[:start] + new, messages=messages,
                       loss_mask=t.loss_mask[:start] + [1] * len(new),
                       logprobs=t.logprobs[:start] + [0.0] * len(new),
                       turn_of_token=t.turn_of_token[:start] + [turn] * len(new))  # fmt: skip

    def recent(self, last: int = 20) -> list[dict[str, Any]]:
        """The newest replayable episodes as a person rates them (the endpoint's GET)."""
        with self.lock:
            items = list(self.episodes.items())[-last:]
        return [{"episode_id": e, "task_id": t.task_id, "termination": t.termination,
                 "reward": t.reward.total, "final": final_text(t)} for e, t in items]  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"consumed": sorted(self.consumed), "pending": [vars(f) for f in self.pending],
                "episodes": dict(self.episodes)}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if not state:
            return
        self.consumed = set(state["consumed"])
        self.pending = [Feedback(**f) for f in state["pending"]]
        self.episodes = dict(state["episodes"])


def final_text(t: Trajectory) -> str:
    """The episode's last assistant text (its answer, or what it said last)."""
    said = [m for m in t.messages if m.get("role") == "assistant"]
    return str(said[-1].get("content") or "") if said else ""
