"""Team episodes: every agent decodes on its own context; each gets a token-exact Trajectory.

Decentralized execution: agent k of an episode is its own sequence in the decode session
(its own KV cache, key ``(episode, k)``), fed only ``env.messages[k]``: its prompt, its
sampled turns (loss mask 1, with their log-probs) and what reached it between its turns, its
tool results and the messages the others sent (``TeamEnv.observe``), appended as chat-template
deltas with mask 0 (DESIGN contract 1). The agents of one episode take turns; the sequences of
many episodes decode together. All agents share the policy (a role prompt tells them apart).

Each agent's ``Trajectory`` carries its own reward (``TeamEnv.finish``) and the episode's
termination; ``info`` links the team: ``team`` (one id per episode), ``agent`` (role name),
``agent_index``, ``team_reward`` (the team's total) and ``views`` (when each of its turns
began, every agent's context length: the joint view a centralized critic reads,
``agentrl.multiagent.central_critic``). GRPO groups the agents' trajectories by task instance
and role (``agentrl.algos.grpo.group_keys``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from agentrl.chat.render import encode_delta, encode_prompt
from agentrl.engine.decoder import draw_seeds
from agentrl.engine.turns import open_session
from agentrl.token_record import extend_context
from agentrl.types import RewardBreakdown, Trajectory


def is_team_env(env: object) -> bool:
    """Whether ``env`` is a multi-agent env (``TeamEnv``: one view and tool set per agent)."""
    return len(getattr(env, "roles", ())) > 1 and hasattr(env, "observe")


@dataclass
class _Agent:
    seed: int
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_of_token: list[int] = field(default_factory=list)
    turns: int = 0
    started: bool = False
    tool_calls: list[dict] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)
    views: list[list[int]] = field(default_factory=list)  # every agent's length per turn

    def append(self, ids: list[int], logprobs: list[float] | None, turn: int) -> None:
        extend_context(self, ids, logprobs, turn)


@dataclass
class _Team:
    env: object
    spec: object
    info: dict
    agents: list[_Agent]
    team_id: str


def run_team_episodes(generator, envs: list[object], specs: list, *, max_new_tokens: int = 96,
                      max_total_tokens: int = 1024, temperature: float = 1.0, top_p: float = 1.0,
                      greedy: bool = False, on_turn: Callable[[int, int], None] | None = None,
                      seed: int | None = None, memory=None,
                      constrained: str = "off") -> list[Trajectory]:  # fmt: skip
    """Play ``envs[i]`` (team envs) on ``specs[i]``; returns every episode's agents'
    trajectories, episode by episode (agent 0, agent 1, ... of spec 0, then of spec 1 ...).

    Episodes are played in chunks whose agents all fit the engine's slots (an agent waiting
    for its turn keeps its slot and its cache)."""
    if memory is not None and memory.enabled:
        raise ValueError("rollout.memory is not supported with a team env (meeting_duo)")
    if constrained != "off":
        raise ValueError("rollout.constrained is not supported with a team env (meeting_duo)")
    n_agents = max(len(env.roles) for env in envs)
    seeds = draw_seeds(len(specs) * n_agents, seed)
    chunk = max(1, int(getattr(generator, "slots", len(specs) * n_agents)) // n_agents)
    out: list[Trajectory] = []
    options = {"max_new": max_new_tokens, "max_total": max_total_tokens}
    sampling = {"temperature": temperature, "top_p": top_p, "greedy": greedy}
    for s in range(0, len(specs), chunk):
        teams = []
        for i in range(s, min(s + chunk, len(specs))):
            views, info = envs[i].reset(seed=specs[i].seed, options={"level": specs[i].level})
            agents = [_Agent(seeds[i * n_agents + k]) for k in range(len(views))]
            teams.append(_Team(envs[i], specs[i], info, agents, f"{info['task_id']}/{i}"))
        out += _play(generator, teams, options, sampling, on_turn, (s, len(specs)))
    return out


def _play(generator, teams: list[_Team], options: dict, sampling: dict, on_turn,
          progress: tuple[int, int]) -> list[Trajectory]:  # fmt: skip
    """Decode one chunk of team episodes to their ends."""
    tok = generator.tokenizer
    max_new, max_total = options["max_new"], options["max_total"]
    sess = open_session(generator, sum(len(t.agents) for t in teams), max_total, **sampling)
    done: dict[int, list[Trajectory]] = {}

    def finish(i: int, termination: str, parts: list[RewardBreakdown] | None = None) -> None:
        team = teams[i]
        parts = parts or team.env.finish(termination)
        done[i] = _trajectories(team, tok, termination, parts)
        for k in range(len(team.agents)):
            sess.release((i, k))
        if on_turn is not None:
            on_turn(progress[0] + len(done), progress[1])

    def begin(i: int) -> None:
        """Start the turn of the team's current agent from what reached it."""
        env = teams[i].env
        k = env.current
        agent, new = teams[i].agents[k], env.observe(k)
        if not agent.started:
            ids = encode_prompt(tok, env.messages[k], env.tool_schemas[k])
        else:
            history = env.messages[k][: len(env.messages[k]) - len(new)]
            ids = encode_delta(tok, history, new, env.tool_schemas[k])
        if len(agent.ids) + len(ids) >= max_total:
            finish(i, "length")
            return
        agent.append(ids, None, -1)
        agent.views.append([len(a.ids) for a in teams[i].agents])  # the joint view now
        budget = max(1, min(max_new, max_total - len(agent.ids)))
        if agent.started:
            sess.extend((i, k), ids, budget)
        else:
            agent.started = True
            sess.add((i, k), list(agent.ids), budget, agent.seed)

    for i in range(len(teams)):
        begin(i)
    while len(done) < len(teams):
        if not sess.busy:
            raise RuntimeError("team rollout: no agent is in a turn but episodes are running")
        for (i, k), sample in sess.step():
            agent, env = teams[i].agents[k], teams[i].env
            room = max_total - len(agent.ids)
            ids, lps = sample.ids[:room], sample.logprobs[:room]
            agent.append(ids, lps, agent.turns)
            agent.turns += 1
            if not sample.stopped or len(ids) < len(sample.ids):
                finish(i, "length")
                continue
            _, _, terminated, truncated, info = env.step(
                tok.decode(ids[:-1], skip_special_tokens=False)
            )
            agent.tool_calls.extend({**c, "turn": agent.turns - 1} for c in info["tool_calls"])
            agent.parse_errors.extend(info.get("parse_errors", []))
            if terminated or truncated:
                finish(i, info["termination"], info["agent_rewards"])
            else:
                begin(i)
    return [traj for i in range(len(teams)) for traj in done[i]]


def _trajectories(team: _Team, tok, termination: str,
                  parts: list[RewardBreakdown]) -> list[Trajectory]:  # fmt: skip
    """One Trajectory per agent; an agent that never took a turn keeps its prompt (mask 0)."""
    env, spec = team.env, team.spec
    team_total = sum(p.total for p in parts) / len(parts)
    out = []
    for k, agent in enumerate(team.agents):
        if not agent.started:
            agent.append(encode_prompt(tok, env.messages[k], env.tool_schemas[k]), None, -1)
        out.append(Trajectory(
            task_id=str(team.info["task_id"]), group_id=spec.group_id,
            messages=list(env.messages[k]), token_ids=agent.ids, loss_mask=agent.mask,
            logprobs=agent.logprobs, turn_of_token=agent.turn_of_token, reward=parts[k],
            termination=termination, level=spec.level, tool_calls=agent.tool_calls,
            info={"turns": agent.turns, "parse_errors": agent.parse_errors, "seed": spec.seed,
                  "env_id": spec.env_id, "team": team.team_id, "agent": env.roles[k],
                  "agent_index": k, "team_reward": team_total, "views": agent.views},
        ))  # fmt: skip
    return out
