"""Run many episodes together: the only place where model output meets an environment.

Each turn, every live episode's token ids go into one batched generation. Sampled ids are
appended with loss mask 1 and their log-probs; the environment's reply is rendered through the
chat template as a *delta* and appended with mask 0 (DESIGN contract 1: history is never
re-tokenized). Finished episodes drop out of the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from agentrl.chat.render import encode_delta, encode_prompt
from agentrl.policy.generate import HFGenerator
from agentrl.types import RewardBreakdown, Trajectory


@dataclass(frozen=True)
class EpisodeSpec:
    """Which task instance to play: env seed and level; episodes of one group share both.

    ``env_id``: which environment (``make_env(env_id)``) when a batch mixes several, as a
    staged curriculum does; None = ``make_env()``, the run's own env.
    """

    seed: int
    level: int
    group_id: int = 0
    env_id: str | None = None


@dataclass
class _Live:
    """Per-episode state while it runs."""

    env: object
    spec: EpisodeSpec
    task_id: str
    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    turn_of_token: list[int]
    turn: int = 0
    tool_calls: list[dict] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)

    def append(self, ids: list[int], logprobs: list[float] | None, turn: int) -> None:
        self.ids.extend(ids)
        policy = logprobs is not None
        self.mask.extend([1 if policy else 0] * len(ids))
        self.logprobs.extend(logprobs if policy else [0.0] * len(ids))
        self.turn_of_token.extend([turn if policy else -1] * len(ids))


def _finish(live: _Live, termination: str, reward: RewardBreakdown) -> Trajectory:
    return Trajectory(
        task_id=live.task_id,
        group_id=live.spec.group_id,
        messages=list(live.env.messages),
        token_ids=live.ids,
        loss_mask=live.mask,
        logprobs=live.logprobs,
        turn_of_token=live.turn_of_token,
        reward=reward,
        termination=termination,
        level=live.spec.level,
        tool_calls=live.tool_calls,
        info={
            "turns": live.turn,
            "parse_errors": live.parse_errors,
            "seed": live.spec.seed,
            "env_id": live.spec.env_id,
        },
    )


def _step_all(pairs: list[tuple[object, str]]) -> list[tuple]:
    """``env.step(text)`` for each pair; concurrently when every env says its steps may
    overlap (``concurrent_steps``: its tools run in worker processes), so slow tool calls of
    many episodes wait together. Each env is stepped by one thread only."""
    if len(pairs) < 2 or not all(getattr(env, "concurrent_steps", False) for env, _ in pairs):
        return [env.step(text) for env, text in pairs]
    with ThreadPoolExecutor(max_workers=min(32, len(pairs))) as pool:
        return list(pool.map(lambda pair: pair[0].step(pair[1]), pairs))


def run_episodes(
    generator: HFGenerator,
    make_env: Callable[..., object],
    specs: list[EpisodeSpec],
    *,
    max_new_tokens: int = 96,
    max_total_tokens: int = 1024,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    on_turn: Callable[[int, int], None] | None = None,
) -> list[Trajectory]:
    """Play one episode per spec to the end; returns trajectories in spec order."""
    tok = generator.tokenizer
    live: list[_Live] = []
    for spec in specs:
        env = make_env() if spec.env_id is None else make_env(spec.env_id)
        messages, info = env.reset(seed=spec.seed, options={"level": spec.level})
        prompt = encode_prompt(tok, messages, env.tool_schemas)
        live.append(_Live(env, spec, str(info.get("task_id", spec.seed)), [], [], [], []))
        live[-1].append(prompt, None, -1)
    done: dict[int, Trajectory] = {}
    active = list(range(len(live)))
    while active:
        budget = [max_total_tokens - len(live[i].ids) for i in active]
        for i, b in zip(list(active), budget, strict=True):
            if b <= 0:  # the prompt alone is over the limit
                done[i] = _finish(live[i], "length", live[i].env.finish("length"))
                active.remove(i)
        if not active:
            break
        n_new = max(
            1, min(max_new_tokens, max(max_total_tokens - len(live[i].ids) for i in active))
        )
        samples = generator.generate(
            [live[i].ids for i in active],
            max_new_tokens=n_new,
            temperature=temperature,
            top_p=top_p,
            greedy=greedy,
        )
        still: list[int] = []
        texts: dict[int, str] = {}
        for i, sample in zip(active, samples, strict=True):
            ep = live[i]
            room = max_total_tokens - len(ep.ids)
            ids, lps = sample.ids[:room], sample.logprobs[:room]
            ep.append(ids, lps, ep.turn)
            ep.turn += 1
            if not sample.stopped or len(ids) < len(sample.ids):
                done[i] = _finish(ep, "length", ep.env.finish("length"))
                continue
            texts[i] = tok.decode(ids[:-1], skip_special_tokens=False)
        steps = _step_all([(live[i].env, text) for i, text in texts.items()])
        for i, step in zip(texts, steps, strict=True):
            ep = live[i]
            obs, _reward, terminated, truncated, info = step
            ep.tool_calls.extend(info.get("tool_calls", []))
            ep.parse_errors.extend(info.get("parse_errors", []))
            if terminated or truncated:
                done[i] = _finish(ep, info["termination"], info["reward"])
                continue
            history = ep.env.messages[: len(ep.env.messages) - len(obs)]
            delta = encode_delta(tok, history, obs, ep.env.tool_schemas)
            if len(ep.ids) + len(delta) >= max_total_tokens:
                done[i] = _finish(ep, "length", ep.env.finish("length"))
                continue
            ep.append(delta, None, -1)
            still.append(i)
        active = still
        if on_turn is not None:
            on_turn(len(done), len(live))
    return [done[i] for i in range(len(live))]
