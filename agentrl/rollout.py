"""Run many episodes together: the only place where model output meets an environment.

Episodes decode together in one engine session (``agentrl.engine``): an episode whose turn
ends steps its environment while the others keep decoding, then its next turn starts from the
environment's reply alone (its KV cache is kept). Sampled ids are appended with loss mask 1
and their log-probs; the environment's reply is rendered through the chat template as a
*delta* and appended with mask 0 (DESIGN contract 1: history is never re-tokenized).

With hierarchical memory (``memory=``, ``agentrl.memory``) an episode whose verbatim window
is full gets a rewritten prompt: its context so far is closed as a token-exact ``Segment``
and the episode goes on in a new context (a fresh KV cache) from the memory's view.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from agentrl.chat.render import encode_observation, encode_prompt, tokenize
from agentrl.config.memory import MemoryConfig
from agentrl.engine.decoder import draw_seeds
from agentrl.engine.grammar import check_mode
from agentrl.engine.turns import open_session
from agentrl.memory.episode import EpisodeMemory
from agentrl.multiagent.rollout import is_team_env, run_team_episodes
from agentrl.token_record import extend_context
from agentrl.types import Message, RewardBreakdown, Segment, Trajectory


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
    memory: EpisodeMemory | None = None
    segments: list[Segment] = field(default_factory=list)  # closed contexts (memory only)
    view: list[Message] = field(default_factory=list)  # messages the context started from
    view_end: int = 0  # len(env.messages) when the context started
    seed: int = 0
    constraint: object | None = None  # the tool-call grammar of its turns (constrained)

    def segment(self, end: int | None = None) -> Segment:
        """The current context as a segment (its turns: ``env.messages[view_end:end]``)."""
        turns = self.env.messages[self.view_end : end]
        return Segment(self.ids, self.mask, self.logprobs, self.turn_of_token,
                       [*self.view, *turns])  # fmt: skip

    def restart(self, view: list[Message], prompt: list[int]) -> None:
        """Close the current context (its turns end before the latest observation) and
        start a new one from ``view``, whose ids are ``prompt``."""
        self.segments.append(self.segment(self.last_assistant_end()))
        self.ids, self.mask, self.logprobs, self.turn_of_token = [], [], [], []
        self.view, self.view_end = view, len(self.env.messages)
        self.append(prompt, None, -1)

    def last_assistant_end(self) -> int:
        """Index just past the last assistant message of ``env.messages``."""
        msgs = self.env.messages
        return next(i + 1 for i in range(len(msgs) - 1, -1, -1)
                    if msgs[i].get("role") == "assistant")  # fmt: skip

    def append(self, ids: list[int], logprobs: list[float] | None, turn: int) -> None:
        extend_context(self, ids, logprobs, turn)


def _finish(live: _Live, termination: str, reward: RewardBreakdown) -> Trajectory:
    segments = [*live.segments, live.segment()] if live.segments else []
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
            **episode_plans(live.env),
        },
        segments=segments,
    )


def episode_plans(env: object) -> dict:
    """A plan-and-execute episode's plans (``PlanExecute.plans``), for its record."""
    plans = getattr(env, "plans", None)
    return {"plans": [list(p) for p in plans]} if plans is not None else {}


def _concurrent(envs: list[object]) -> bool:
    """Whether every env says its steps may overlap (``concurrent_steps``: its tools run in
    worker processes), so slow tool calls of many episodes wait together while others
    decode. Otherwise steps run inline, in a fixed order (a reproducible rollout)."""
    return len(envs) > 1 and all(getattr(env, "concurrent_steps", False) for env in envs)


class _Stepper:
    """``env.step(text)`` now (inline) or in a worker thread (concurrent envs)."""

    def __init__(self, concurrent: bool, workers: int):
        self.pool = ThreadPoolExecutor(max_workers=workers) if concurrent else None
        self.inline: list[tuple[int, tuple]] = []
        self.futures: dict[Future, int] = {}

    def submit(self, i: int, env, text: str) -> None:
        if self.pool is None:
            self.inline.append((i, env.step(text)))
        else:
            self.futures[self.pool.submit(env.step, text)] = i

    def results(self, block: bool) -> list[tuple[int, tuple]]:
        """Steps that are done (``block``: wait for at least one if none is)."""
        out, self.inline = self.inline, []
        if self.futures and (block or any(f.done() for f in self.futures)):
            finished, _ = wait(self.futures, return_when=FIRST_COMPLETED)
            for f in sorted(finished, key=lambda f: self.futures[f]):
                out.append((self.futures.pop(f), f.result()))
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


def run_episodes(
    generator,
    make_env: Callable[..., object],
    specs: list[EpisodeSpec],
    *,
    max_new_tokens: int = 96,
    max_total_tokens: int = 1024,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    on_turn: Callable[[int, int], None] | None = None,
    memory: MemoryConfig | None = None,
    constrained: str = "off",
    seed: int | None = None,
) -> list[Trajectory]:
    """Play one episode per spec to the end; returns trajectories in spec order (a team env,
    ``agentrl.multiagent``: each episode's agents' trajectories, in agent order).

    ``generator``: an ``agentrl.engine.Engine`` (each episode keeps its KV cache across turns,
    finished episodes' rows are refilled) or anything with a batch ``generate``.
    ``memory``: ``rollout.memory``; when enabled, long episodes are played in segments
    (``Trajectory.segments``) with hierarchical memory, and ``max_total_tokens`` limits each
    context rather than the whole episode.
    ``constrained``: ``"tool_calls"`` lets each turn write only well-formed calls of the
    episode's tools (``agentrl.engine.grammar``; needs agentrl's engine); ``"off"``: free.
    ``seed``: the base of the episodes' sampling seeds (None: one draw of torch's global RNG);
    an asynchronous rollout draws it where the step is scheduled, so a worker thread replays
    exactly.
    """
    tok = generator.tokenizer
    envs = [make_env() if spec.env_id is None else make_env(spec.env_id) for spec in specs]
    if any(is_team_env(env) for env in envs):  # multi-agent: a trajectory per agent
        return run_team_episodes(generator, envs, specs, max_new_tokens=max_new_tokens,
                                 max_total_tokens=max_total_tokens, temperature=temperature,
                                 top_p=top_p, greedy=greedy, on_turn=on_turn, seed=seed,
                                 memory=memory, constrained=constrained)  # fmt: skip
    live = _start(tok, envs, specs, _constraints(generator, constrained), memory)
    sess = open_session(generator, len(live), max_total_tokens, temperature=temperature,
                        top_p=top_p, greedy=greedy)  # fmt: skip
    done: dict[int, Trajectory] = {}

    def finish(i: int, termination: str, reward: RewardBreakdown | None = None) -> None:
        ep = live[i]
        done[i] = _finish(ep, termination, reward or ep.env.finish(termination))
        sess.release(i)
        if on_turn is not None:
            on_turn(len(done), len(live))

    starting = [i for i, ep in enumerate(live) if len(ep.ids) < max_total_tokens]
    shared = _shared_prefix(generator, [live[i].ids for i in starting])
    if shared:
        sess.set_prefix(live[starting[0]].ids[:shared])
    for i, ep_seed in zip(starting, draw_seeds(len(starting), seed), strict=True):
        live[i].seed = ep_seed
        sess.add(i, live[i].ids, _budget(live[i], max_new_tokens, max_total_tokens), ep_seed,
                 constraint=live[i].constraint)  # fmt: skip
    for i in set(range(len(live))) - set(starting):  # the prompt alone is over the limit
        finish(i, "length")
    stepper = _Stepper(_concurrent([ep.env for ep in live]), min(32, max(1, len(live))))
    try:
        while len(done) < len(live):
            for i, sample in sess.step() if sess.busy else []:
                ep = live[i]
                room = max_total_tokens - len(ep.ids)
                ids, lps = sample.ids[:room], sample.logprobs[:room]
                ep.append(ids, lps, ep.turn)
                ep.turn += 1
                if not sample.stopped or len(ids) < len(sample.ids):
                    finish(i, "length")
                else:
                    stepper.submit(i, ep.env, tok.decode(ids[:-1], skip_special_tokens=False))
            for i, step in stepper.results(block=not sess.busy):
                _after_step(live[i], i, step, sess, finish, tok, max_new_tokens, max_total_tokens)
    finally:
        stepper.close()
    return [done[i] for i in range(len(live))]


def _start(tok, envs: list[object], specs: list[EpisodeSpec], constraint_for,
           memory: MemoryConfig | None) -> list[_Live]:  # fmt: skip
    """Reset each episode's env and render its prompt (``run_episodes``' first step)."""
    live: list[_Live] = []
    for spec, env in zip(specs, envs, strict=True):
        messages, info = env.reset(seed=spec.seed, options={"level": spec.level})
        prompt = encode_prompt(tok, messages, env.tool_schemas)
        live.append(_Live(env, spec, str(info.get("task_id", spec.seed)), [], [], [], []))
        live[-1].append(prompt, None, -1)
        live[-1].constraint = constraint_for(env.tool_schemas)
        if memory is not None and memory.enabled:
            live[-1].memory = EpisodeMemory(memory, lambda text: len(tokenize(tok, text)))
            live[-1].view, live[-1].view_end = [dict(m) for m in messages], len(env.messages)
    return live


def play_specs(generator, make_env: Callable[..., object], specs: list[EpisodeSpec], ro,
               temperature: float, *, seed: int | None = None,
               on_turn: Callable[[int, int], None] | None = None) -> list[Trajectory]:  # fmt: skip
    """``run_episodes`` with the run's ``rollout`` settings (``ro``): a training step's
    episodes, wherever they are played (the trainer, the asynchronous thread, a Ray actor)."""
    return run_episodes(generator, make_env, specs, max_new_tokens=ro.max_new_tokens,
                        max_total_tokens=ro.max_total_tokens, temperature=temperature,
                        top_p=ro.top_p, memory=ro.memory, constrained=ro.constrained, seed=seed,
                        on_turn=on_turn)  # fmt: skip


def _after_step(ep: _Live, i: int, step: tuple, sess, finish, tok, max_new: int,
                max_total: int) -> None:  # fmt: skip
    """An environment step is back: end the episode, or start its next turn with the delta."""
    obs, _reward, terminated, truncated, info = step
    turn = info.get("turn", 0) - 1  # the call's assistant turn, 0-based (per_turn's index)
    ep.tool_calls.extend({**call, "turn": turn} for call in info.get("tool_calls", []))
    ep.parse_errors.extend(info.get("parse_errors", []))
    if terminated or truncated:
        finish(i, info["termination"], info["reward"])
        return
    if ep.memory is not None and ep.memory.needs_rewrite(ep.turn):
        _rewrite(ep, i, sess, finish, tok, max_new, max_total)
        return
    delta = encode_observation(tok, ep.env, obs)
    if len(ep.ids) + len(delta) >= max_total:
        finish(i, "length")
        return
    ep.append(delta, None, -1)
    sess.extend(i, delta, _budget(ep, max_new, max_total))


def _rewrite(ep: _Live, i: int, sess, finish, tok, max_new: int, max_total: int) -> None:
    """Memory's view of the episode becomes the prompt of a new context (a new segment)."""
    view = ep.memory.view(ep.env.messages)
    prompt = encode_prompt(tok, view, ep.env.tool_schemas)
    if len(prompt) >= max_total:
        finish(i, "length")
        return
    ep.restart(view, prompt)
    sess.release(i)
    sess.add(i, ep.ids, _budget(ep, max_new, max_total), ep.seed + 7919 * len(ep.segments),
             constraint=ep.constraint)  # fmt: skip


def _constraints(generator, constrained: str) -> Callable[[list[dict]], object | None]:
    """Tool schemas -> a turn constraint (or None), for ``run_episodes(constrained=...)``."""
    check_mode(constrained)
    if constrained == "off":
        return lambda schemas: None
    if not hasattr(generator, "tool_call_constraint"):
        raise ValueError("rollout.constrained=tool_calls masks logits inside agentrl's engine; "
                         f"{type(generator).__name__} has no tool_call_constraint")  # fmt: skip
    return generator.tool_call_constraint


def _budget(ep: _Live, max_new: int, max_total: int) -> int:
    """This turn's token budget: ``max_new``, or what is left of ``max_total``."""
    return max(1, min(max_new, max_total - len(ep.ids)))


def _shared_prefix(generator, prompts: list[list[int]]) -> int:
    """Prompt tokens every episode shares, when the generator computes them once."""
    if not prompts or not getattr(generator, "supports_sessions", False):
        return 0
    return generator.shared_prefix(prompts)
