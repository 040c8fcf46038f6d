"""Hierarchical episodes in one engine session, token-exact (``rollout.mode: hierarchical``).

Each episode is a ``Hierarchy`` (``agentrl.planning.hierarchy``) whose contexts are played as
token-exact segments, the way a memory rollout plays its contexts: a context's prompt is
rendered once, every reply is the policy's sampled ids (mask 1, with their log-probs) and every
message after it a chat-template delta (mask 0). A worker context starts with a fresh KV cache;
when it closes, the manager's context goes on from its own ids plus the ``Result:`` delta (its
ids are prefilled again: an episode holds one decode slot at a time, so slots never wait on
each other). ``max_total_tokens`` limits each context. With ``adapters: per_role`` the manager's
contexts decode in a session of the manager adapter's weights and the workers' in one of the
worker adapter's (``agentrl.policy.roles``); an episode is in one of them at a time.
Before RL begins (no adapters yet) both roles decode the base.

The trajectory's ``segments`` are the worker contexts in order, then the manager's (whose ids
and messages are also the trajectory's own); ``info["hierarchy"]`` has one entry per segment
(role, subgoal, type, reward: what ``agentrl.algos.hierarchical`` trains on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from agentrl.chat.render import encode_delta, encode_prompt
from agentrl.config.hierarchy import HierarchyConfig
from agentrl.engine.decoder import draw_seeds
from agentrl.engine.turns import TURN_SEED_STRIDE, open_session
from agentrl.planning.hierarchy import Context, Hierarchy, Outcome
from agentrl.policy.roles import ROLES, uses_role_adapters
from agentrl.rollout import EpisodeSpec
from agentrl.token_record import extend_context
from agentrl.types import RewardBreakdown, Segment, Trajectory


@dataclass
class _Tokens:
    """One context's token-exact record."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_of_token: list[int] = field(default_factory=list)

    def append(self, ids: list[int], logprobs: list[float] | None, turn: int) -> None:
        extend_context(self, ids, logprobs, turn)

    def segment(self, ctx: Context) -> Segment:
        return Segment(self.ids, self.mask, self.logprobs, self.turn_of_token, list(ctx.messages))


@dataclass
class _Episode:
    h: Hierarchy
    spec: EpisodeSpec
    task_id: str
    manager: _Tokens
    active: _Tokens
    seed: int = 0
    opens: int = 0  # contexts (re)started in the session
    turn: int = 0
    workers: list[Segment] = field(default_factory=list)
    tool_calls: list[dict] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)


def run_hierarchical(
    generator,
    make_env: Callable[..., object],
    specs: list[EpisodeSpec],
    cfg: HierarchyConfig,
    *,
    max_new_tokens: int = 96,
    max_total_tokens: int = 1024,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    seed: int | None = None,
    on_turn: Callable[[int, int], None] | None = None,
) -> list[Trajectory]:
    """Play one hierarchical episode per spec (module docstring); trajectories in spec order."""
    tok = generator.tokenizer
    eps: list[_Episode] = []
    for spec in specs:
        env = make_env() if spec.env_id is None else make_env(spec.env_id)
        h = Hierarchy(env, cfg)
        ctx, info = h.reset(seed=spec.seed, options={"level": spec.level})
        tokens = _Tokens()
        tokens.append(encode_prompt(tok, ctx.messages, None), None, -1)
        eps.append(_Episode(h, spec, str(info.get("task_id", spec.seed)), tokens, tokens))
    roles = ROLES if per_role_model(generator, cfg) else (None,)
    sessions = {r: open_session(generator, len(eps), max_total_tokens, temperature=temperature,
                                top_p=top_p, greedy=greedy, adapter=r)
                for r in roles}  # fmt: skip
    done: dict[int, Trajectory] = {}

    def sess_of(ep: _Episode):
        """The session decoding ``ep``'s active context (its role's adapter)."""
        if None in sessions:
            return sessions[None]
        return sessions["manager" if ep.active is ep.manager else "worker"]

    def release(i: int) -> None:
        for sess in sessions.values():
            sess.release(i)

    def finish(i: int, termination: str, reward: RewardBreakdown | None = None) -> None:
        ep = eps[i]
        done[i] = _trajectory(ep, termination, reward or ep.h.finish(termination))
        release(i)
        if on_turn is not None:
            on_turn(len(done), len(eps))

    def start(i: int, ids: list[int]) -> None:
        ep = eps[i]
        release(i)
        sess_of(ep).add(i, ids, _budget(ep.active, max_new_tokens, max_total_tokens),
                 ep.seed + TURN_SEED_STRIDE * 101 * ep.opens)  # fmt: skip
        ep.opens += 1

    for i, ep_seed in zip(range(len(eps)), draw_seeds(len(eps), seed), strict=True):
        eps[i].seed = ep_seed
        if len(eps[i].manager.ids) >= max_total_tokens:
            finish(i, "length")
        else:
            start(i, eps[i].manager.ids)
    while len(done) < len(eps):
        busy = [sess for sess in sessions.values() if sess.busy]
        if not busy:
            raise RuntimeError("hierarchical rollout: episodes left but none is decoding")
        for i, sample in (pair for sess in busy for pair in sess.step()):
            ep = eps[i]
            room = max_total_tokens - len(ep.active.ids)
            ids, lps = sample.ids[:room], sample.logprobs[:room]
            ep.active.append(ids, lps, ep.turn)
            ep.turn += 1
            if not sample.stopped or len(ids) < len(sample.ids):
                finish(i, "length")
                continue
            out = ep.h.act(tok.decode(ids[:-1], skip_special_tokens=False))
            _apply(ep, i, out, tok, finish, start, sess_of(ep), max_new_tokens,
                   max_total_tokens)  # fmt: skip
    return [done[i] for i in range(len(eps))]


def _apply(ep: _Episode, i: int, out: Outcome, tok, finish, start, sess, max_new: int,
           max_total: int) -> None:  # fmt: skip
    """Carry out what the reply led to: a delta in the same context, a new worker context,
    the manager again, or the end."""
    turn = ep.turn - 1
    ep.tool_calls.extend({**c, "turn": turn} for c in out.tool_calls)
    ep.parse_errors.extend(out.parse_errors)
    if out.kind == "end":
        finish(i, out.termination, out.reward)
        return
    ctx = out.context
    if out.kind == "open":
        ep.active = _Tokens()
        prompt = encode_prompt(tok, ctx.messages, ctx.tools)
        ep.active.append(prompt, None, -1)
        if len(prompt) >= max_total:
            finish(i, "length")
        else:
            start(i, prompt)
        return
    history, new = ctx.messages[: len(ctx.messages) - out.new], ctx.messages[-out.new :]
    if out.kind == "resume":  # the worker's context is closed: its segment is kept
        ep.workers.append(ep.active.segment(ep.h.workers[-1]["context"]))
        ep.active = ep.manager
    delta = encode_delta(tok, history, new, ctx.tools)
    if len(ep.active.ids) + len(delta) >= max_total:
        finish(i, "length")
        return
    ep.active.append(delta, None, -1)
    if out.kind == "resume":
        start(i, ep.active.ids)
    else:
        sess.extend(i, delta, _budget(ep.active, max_new, max_total))


def _trajectory(ep: _Episode, termination: str, reward: RewardBreakdown) -> Trajectory:
    """The episode: worker segments in order, then the manager's (module docstring)."""
    h = ep.h
    workers = list(ep.workers)
    if len(workers) < len(h.workers):  # a worker still open when the episode ended
        workers.append(ep.active.segment(h.workers[-1]["context"]))
    manager = ep.manager.segment(h.manager)
    roles = [{k: v for k, v in w.items() if k != "context"} for w in h.workers]
    roles.append({"role": "manager", "subgoals": len(h.workers)})
    return Trajectory(
        task_id=ep.task_id,
        group_id=ep.spec.group_id,
        messages=manager.messages,
        token_ids=manager.token_ids,
        loss_mask=manager.loss_mask,
        logprobs=manager.logprobs,
        turn_of_token=manager.turn_of_token,
        reward=reward,
        termination=termination,
        level=ep.spec.level,
        tool_calls=ep.tool_calls,
        info={
            "turns": ep.turn,
            "parse_errors": ep.parse_errors,
            "seed": ep.spec.seed,
            "env_id": ep.spec.env_id,
            "hierarchy": roles,
            "env_messages": [dict(m) for m in h.env.messages],
        },  # fmt: skip
        segments=[*workers, manager],
    )


def per_role_model(generator, cfg: HierarchyConfig) -> bool:
    """Whether each role decodes with its own adapter: ``adapters: per_role`` and a policy that
    has them. Before RL begins (the evaluation before RL) the adapters do not exist yet; both
    would start at zero, i.e. the base, which is then decoded for both roles."""
    return cfg.adapters == "per_role" and uses_role_adapters(getattr(generator, "model", None))


def _budget(tokens: _Tokens, max_new: int, max_total: int) -> int:
    return max(1, min(max_new, max_total - len(tokens.ids)))


def play_hierarchical(generator, make_env: Callable[..., object], specs: list[EpisodeSpec],
                      ro, temperature: float, *,
                      seed: int | None = None) -> list[Trajectory]:  # fmt: skip
    """``run_hierarchical`` with the run's ``rollout`` settings (``ro``): a training step."""
    return run_hierarchical(generator, make_env, specs, ro.hierarchy,
                            max_new_tokens=ro.max_new_tokens,
                            max_total_tokens=ro.max_total_tokens, temperature=temperature,
                            top_p=ro.top_p, seed=seed)  # fmt: skip
