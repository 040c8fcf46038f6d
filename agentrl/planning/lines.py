"""A tree search's dialogues: an episode or a branch as a line of token ids and its env.

``play_turn`` appends a sampled turn and steps the env; ``end_line`` scores one that stops
early; ``line_trajectory`` is the kept episode as a ``Trajectory``. Shared by the search one
episode at a time (``agentrl.planning.search``), batched (``search_batch``) and as a training
rollout (``search_train``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.render import encode_observation, encode_prompt
from agentrl.rollout import EpisodeSpec, episode_plans
from agentrl.types import Trajectory


@dataclass
class SearchCost:
    """What the search spent: generated tokens (the kept turns and the branches) and time."""

    episode_tokens: int = 0
    branch_tokens: int = 0
    branches: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"episode_tokens": self.episode_tokens, "branch_tokens": self.branch_tokens,
                "branches": self.branches, "seconds": round(self.seconds, 2)}  # fmt: skip


@dataclass
class Line:
    """A running dialogue: its env and token ids (an episode or a branch)."""

    env: Any
    ids: list[int]
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_of_token: list[int] = field(default_factory=list)
    tool_calls: list[dict] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)
    turn: int = 0
    ended: str | None = None
    value: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.ids)
        self.mask, self.logprobs, self.turn_of_token = [0] * n, [0.0] * n, [-1] * n


def play_turn(line: Line, sample: Any, tok: Any, max_total: int) -> None:
    """Append one sampled turn to ``line`` and step its env (ending it when the turn or the
    env says so; ``line.value`` is then the episode's reward)."""
    room = max_total - len(line.ids)
    ids, lps = sample.ids[:room], sample.logprobs[:room]
    line.ids += ids
    line.mask += [1] * len(ids)
    line.logprobs += lps
    line.turn_of_token += [line.turn] * len(ids)
    line.turn += 1
    if not sample.stopped or len(ids) < len(sample.ids):
        end_line(line, "length")
        return
    obs, _, terminated, truncated, info = line.env.step(
        tok.decode(ids[:-1], skip_special_tokens=False)
    )
    line.tool_calls += [{**c, "turn": line.turn - 1} for c in info.get("tool_calls", [])]
    line.parse_errors += info.get("parse_errors", [])
    if terminated or truncated:
        line.ended, line.value = info["termination"], info["reward"].total
        return
    delta = encode_observation(tok, line.env, obs)
    if len(line.ids) + len(delta) >= max_total:
        end_line(line, "length")
        return
    line.ids += delta
    line.mask += [0] * len(delta)
    line.logprobs += [0.0] * len(delta)
    line.turn_of_token += [-1] * len(delta)


def end_line(line: Line, reason: str) -> None:
    line.ended, line.value = reason, line.env.finish(reason).total


def start_line(tok, make_env, spec, max_total: int) -> tuple[Line, str]:
    """A new episode's line from ``spec`` (ended at once when its prompt is over
    ``max_total``) and its task id."""
    env = make_env()
    messages, info = env.reset(seed=spec.seed, options={"level": spec.level})
    line = Line(env, encode_prompt(tok, messages, env.tool_schemas))
    if len(line.ids) >= max_total:
        end_line(line, "length")
    return line, str(info.get("task_id", spec.seed))


def branch_from(line: Line, make_env: Any, snap: Any) -> Line:
    """A branch of ``line``: a fresh env restored from ``snap`` (its snapshot) and a copy of
    its ids, at its turn."""
    env = make_env()
    env.restore(snap)
    branch = Line(env, list(line.ids))
    branch.turn = line.turn
    return branch


def value_running(branches: list[Line], scorer: Any) -> None:
    """Value the branches still running after the lookahead: ``scorer``'s predicted return
    from their ids, or (no scorer) the reward layers they earned so far (no completion)."""
    running = [b for b in branches if b.ended is None]
    if scorer is not None and running:
        for branch, value in zip(running, scorer([b.ids for b in running]), strict=True):
            branch.value = value
    else:
        for branch in running:
            end_line(branch, "max_turns")


def best_of(candidates: list[Any], branches: list[Line]) -> Any:
    """The candidate whose branch is worth most; ties: the earliest (the greedy one first)."""
    values = [b.value for b in branches]
    return candidates[values.index(max(values))]


def candidate_seed(episode_seed: int, turn: int, j: int) -> int:
    """The sampling seed of candidate ``j`` (0: the greedy one) at ``turn`` of an episode."""
    return (episode_seed * 1_000_003 + turn * 1_009 + j) % 2**31


def line_trajectory(line: Line, spec: EpisodeSpec, task_id: str) -> Trajectory:
    return Trajectory(
        task_id=task_id, group_id=spec.group_id, messages=list(line.env.messages),
        token_ids=line.ids, loss_mask=line.mask, logprobs=line.logprobs,
        turn_of_token=line.turn_of_token, reward=line.env.finish(line.ended or "length"),
        termination=line.ended or "length", level=spec.level, tool_calls=line.tool_calls,
        info={"turns": line.turn, "parse_errors": line.parse_errors, "seed": spec.seed,
              "env_id": spec.env_id, **episode_plans(line.env)},
    )  # fmt: skip
