"""Value-guided tree search at a turn (seed 000 §1.1): expand K actions, look ahead, keep the best.

At every turn of an episode the policy proposes K candidate actions from the same history:
the greedy one and K-1 sampled at ``temperature``. Each candidate is played in a branch (a
fresh env restored from the episode's snapshot, ``agentrl.envs.snapshot``) and followed
greedily for up to ``depth - 1`` more turns. A branch that ends is worth its episode reward;
one still running after the lookahead is worth what it has earned so far (its reward layers
scored as if it stopped there: format, tool choice, arguments, progress; no completion), or,
with a PPO run's critic (``scorer``, ``agentrl.planning.value``), its predicted return. The
episode takes the best candidate (ties: the greedy one) and moves on; the branches are
dropped. K = 1 is plain greedy decoding.

Each turn's generations are one batch over its branches (the K-1 samples, then each
lookahead turn of the K branches): they share the episode's history, which the engine
prefills once (``Engine.generate`` computes the shared prefix).

Cost is reported next to success: tokens generated (episodes and branches) and seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.render import encode_delta, encode_prompt
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
class _Line:
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


def _play(line: _Line, sample: Any, tok: Any, max_total: int) -> None:
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
        _end(line, "length")
        return
    obs, _, terminated, truncated, info = line.env.step(
        tok.decode(ids[:-1], skip_special_tokens=False)
    )
    line.tool_calls += [{**c, "turn": line.turn - 1} for c in info.get("tool_calls", [])]
    line.parse_errors += info.get("parse_errors", [])
    if terminated or truncated:
        line.ended, line.value = info["termination"], info["reward"].total
        return
    history = line.env.messages[: len(line.env.messages) - len(obs)]
    delta = encode_delta(tok, history, obs, line.env.tool_schemas)
    if len(line.ids) + len(delta) >= max_total:
        _end(line, "length")
        return
    line.ids += delta
    line.mask += [0] * len(delta)
    line.logprobs += [0.0] * len(delta)
    line.turn_of_token += [-1] * len(delta)


def _end(line: _Line, reason: str) -> None:
    line.ended, line.value = reason, line.env.finish(reason).total


def search_episodes(
    generator: Any,
    make_env: Callable[[], Any],
    specs: list[EpisodeSpec],
    *,
    k: int,
    depth: int = 1,
    temperature: float = 0.8,
    max_new_tokens: int = 96,
    max_total_tokens: int = 1024,
    on_episode: Callable[[int, int], None] | None = None,
    scorer: Callable[[list[list[int]]], list[float]] | None = None,
) -> tuple[list[Trajectory], SearchCost]:
    """Play each spec's episode with tree search (module docstring); trajectories in order.

    ``scorer``: values for branches still running after the lookahead, from their token
    ids (``agentrl.planning.value.critic_scorer``: a PPO critic); default: the reward layers
    they earned so far."""
    if k < 1 or depth < 1:
        raise ValueError(f"tree search needs k >= 1 and depth >= 1, got k={k}, depth={depth}")
    cost, start = SearchCost(), time.perf_counter()
    trajs = []
    for n, spec in enumerate(specs, 1):
        trajs.append(_search_episode(generator, make_env, spec, k, depth, temperature,
                                     max_new_tokens, max_total_tokens, cost, scorer))  # fmt: skip
        if on_episode is not None:
            on_episode(n, len(specs))
    cost.seconds = time.perf_counter() - start
    return trajs, cost


def start_line(tok, make_env, spec, max_total: int) -> tuple[_Line, str]:
    """A new episode's line from ``spec`` (ended at once when its prompt is over
    ``max_total``) and its task id."""
    env = make_env()
    messages, info = env.reset(seed=spec.seed, options={"level": spec.level})
    line = _Line(env, encode_prompt(tok, messages, env.tool_schemas))
    if len(line.ids) >= max_total:
        _end(line, "length")
    return line, str(info.get("task_id", spec.seed))


def _search_episode(generator, make_env, spec, k, depth, temperature, max_new, max_total, cost,
                    scorer):  # fmt: skip
    tok = generator.tokenizer
    line, task_id = start_line(tok, make_env, spec, max_total)
    while line.ended is None:
        sample = _best_candidate(generator, make_env, line, k, depth, temperature, max_new,
                                 max_total, cost, scorer)  # fmt: skip
        cost.episode_tokens += len(sample.ids)
        _play(line, sample, tok, max_total)
    return _trajectory(line, spec, task_id)


def _best_candidate(generator, make_env, line, k, depth, temperature, max_new, max_total, cost,
                    scorer=None):  # fmt: skip
    """The greedy action and K-1 sampled ones from ``line``'s history, each played in a
    restored branch and followed greedily ``depth - 1`` turns; the best by branch value."""
    if k == 1:
        (greedy,) = generator.generate([line.ids], max_new_tokens=max_new, greedy=True)
        return greedy
    candidates, branches = expand_turn(generator, make_env, line, k, depth, temperature,
                                       max_new, max_total, cost, scorer)  # fmt: skip
    return best_of(candidates, branches)


def best_of(candidates: list[Any], branches: list[_Line]) -> Any:
    """The candidate whose branch is worth most; ties: the earliest (the greedy one first)."""
    values = [b.value for b in branches]
    return candidates[values.index(max(values))]


def expand_turn(generator, make_env, line, k, depth, temperature, max_new, max_total, cost,
                scorer=None, greedy_first=True, top_p=1.0):  # fmt: skip
    """K candidate actions from ``line``'s history (the greedy one first, or all K sampled),
    each played in a branch restored from the episode's snapshot and followed greedily
    ``depth - 1`` turns, every branch valued; returns (candidates, branches).

    Each generation is one batch over the branches of this turn, whose shared history the
    engine prefills once.
    """
    candidates = []
    if greedy_first:
        candidates += generator.generate([line.ids], max_new_tokens=max_new, greedy=True)
    n = k - len(candidates)
    candidates += generator.generate([line.ids] * n, max_new_tokens=max_new,
                                     temperature=temperature, top_p=top_p)  # fmt: skip
    snap = line.env.snapshot()
    branches = []
    for sample in candidates:
        env = make_env()
        env.restore(snap)
        branch = _Line(env, list(line.ids))
        branch.turn = line.turn
        _play(branch, sample, generator.tokenizer, max_total)
        branches.append(branch)
        cost.branch_tokens += len(sample.ids)
    cost.branches += len(branches)
    for _ in range(depth - 1):
        running = [b for b in branches if b.ended is None]
        if not running:
            break
        outs = generator.generate([b.ids for b in running], max_new_tokens=max_new, greedy=True)
        for branch, sample in zip(running, outs, strict=True):
            cost.branch_tokens += len(sample.ids)
            _play(branch, sample, generator.tokenizer, max_total)
    running = [b for b in branches if b.ended is None]
    if scorer is not None and running:  # still running: its predicted return
        for branch, value in zip(running, scorer([b.ids for b in running]), strict=True):
            branch.value = value
    else:  # still running: what it earned so far (no completion)
        for branch in running:
            _end(branch, "max_turns")
    return candidates, branches


def _trajectory(line: _Line, spec: EpisodeSpec, task_id: str) -> Trajectory:
    return Trajectory(
        task_id=task_id, group_id=spec.group_id, messages=list(line.env.messages),
        token_ids=line.ids, loss_mask=line.mask, logprobs=line.logprobs,
        turn_of_token=line.turn_of_token, reward=line.env.finish(line.ended or "length"),
        termination=line.ended or "length", level=spec.level, tool_calls=line.tool_calls,
        info={"turns": line.turn, "parse_errors": line.parse_errors, "seed": spec.seed,
              "env_id": spec.env_id, **episode_plans(line.env)},
    )  # fmt: skip
