"""The team rollout: per-agent token-exact trajectories, decentralized contexts, per-role GRPO
groups, and one GRPO step on meeting_duo through `agentrl train`'s real path."""

import json

import pytest

from agentrl.algos.grpo import compute_advantages, group_keys
from agentrl.chat.render import encode_conversation, render_text, stop_token_ids, tokenize
from agentrl.multiagent.meeting_duo import MeetingDuoFamily, world_secrets
from agentrl.multiagent.team import TeamEnv
from agentrl.policy.generate import Sample
from agentrl.rollout import EpisodeSpec, run_episodes


class TeamScript:
    """A scripted policy for team envs: each prompt is matched to the agent whose view it
    renders (a check of the ids by itself), which then plays its reference turn, or
    ``override(role, turn)`` when that returns text."""

    def __init__(self, tokenizer, envs, override=lambda role, turn: None):
        self.tokenizer, self.envs, self.override = tokenizer, envs, override
        self.stop = stop_token_ids(tokenizer)[0]
        self.produced: dict[tuple[int, int], list[int]] = {}  # (env, role) -> sampled ids

    def _whose(self, prompt: list[int]) -> tuple[int, int]:
        text = self.tokenizer.decode(prompt, skip_special_tokens=False)
        for e, env in enumerate(self.envs):
            for k in range(env.n_agents):
                rendered = render_text(self.tokenizer, env.messages[k], env.tool_schemas[k],
                                       add_generation_prompt=True)  # fmt: skip
                if not env.done and env.current == k and rendered == text:
                    return e, k
        raise AssertionError("a prompt is no agent's current view")

    def generate(self, prompts, **kwargs):
        out = []
        for prompt in prompts:
            e, k = self._whose(prompt)
            env = self.envs[e]
            text = self.override(k, env.turns[k])
            if text is None:
                text = env.family.reference_turn(env.instance, k, env.turns[k])
            ids = tokenize(self.tokenizer, text) + [self.stop]
            self.produced.setdefault((e, k), []).extend(ids)
            out.append(Sample(ids, [-0.25] * len(ids), True))
        return out


def _play(tok, specs, override=lambda role, turn: None):
    envs: list[TeamEnv] = []

    def make_env():
        envs.append(TeamEnv(MeetingDuoFamily(), max_turns=5))
        return envs[-1]

    gen = TeamScript(tok, envs, override)
    trajs = run_episodes(gen, make_env, specs, max_new_tokens=256, max_total_tokens=1800)
    return trajs, envs, gen


def test_reference_team_rollout_is_token_exact_per_agent(tiny_policy):
    _, tok = tiny_policy
    specs = [EpisodeSpec(seed=s, level=1 + s % 2, group_id=s // 2) for s in range(4)]
    trajs, envs, gen = _play(tok, specs)
    assert len(trajs) == 8 and all(t.termination == "success" for t in trajs)
    assert [t.info["agent"] for t in trajs] == ["calendar", "contacts"] * 4
    assert [t.info["turns"] for t in trajs] == [4, 3] * 4
    for i, traj in enumerate(trajs):
        e, k = divmod(i, 2)
        assert traj.info["team"] == trajs[2 * e].info["team"] == f"{envs[e].instance.task_id}/{e}"
        assert traj.group_id == specs[e].group_id
        # the ids are the template's rendering of this agent's own view, mask on its turns only
        ids, mask = encode_conversation(tok, traj.messages, envs[e].tool_schemas[k])
        assert (traj.token_ids, traj.loss_mask) == (ids, mask)
        assert [t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m] == \
            gen.produced[(e, k)]  # fmt: skip
        assert [lp for lp, m in zip(traj.logprobs, traj.loss_mask, strict=True) if m] == \
            [-0.25] * sum(traj.loss_mask)  # fmt: skip
        assert set(traj.turn_of_token) == {-1, *range(traj.info["turns"])}
        assert traj.reward is envs[e].breakdowns[k]
        assert traj.info["team_reward"] == pytest.approx(
            (envs[e].breakdowns[0].total + envs[e].breakdowns[1].total) / 2
        )
    # GRPO: one baseline group per (task instance, role)
    assert group_keys(trajs).tolist() == [0, 1, 0, 1, 2, 3, 2, 3]


def test_an_agent_context_holds_the_other_side_only_once_sent(tiny_policy):
    _, tok = tiny_policy
    spec = [EpisodeSpec(seed=5, level=2, group_id=0)]
    trajs, envs, _ = _play(tok, spec)
    calendar = tok.decode(trajs[0].token_ids, skip_special_tokens=False)
    contacts = tok.decode(trajs[1].token_ids, skip_special_tokens=False)
    emails, slot = world_secrets(envs[0].instance, 1), world_secrets(envs[0].instance, 0)[0]
    sent = calendar.index("[from contacts]")
    assert all(sent < calendar.index(e) for e in emails)  # first seen in the message
    assert slot in calendar and slot not in contacts  # the tool result stays private
    # a contacts agent that never writes: its addresses never reach the calendar agent
    trajs, envs, _ = _play(tok, spec, _silent_contacts)
    calendar = tok.decode(trajs[0].token_ids, skip_special_tokens=False)
    assert not any(e in calendar for e in emails) and "[from contacts]" not in calendar
    assert [t.termination for t in trajs] == ["failure", "failure"]
    cal, con = (t.reward for t in trajs)
    assert cal.layers["completion"] == con.layers["completion"] == 0.0
    assert con.layers["progress"] == 0.0 and cal.layers["progress"] == pytest.approx(2 / 3)
    adv, _ = compute_advantages(trajs, "zero", scale=False)
    assert adv.tolist() == [0.0, 0.0]  # each role alone in its group


def _silent_contacts(role: int, turn: int) -> str | None:
    """An override: the contacts agent answers at once, sending nothing; the calendar agent
    finds and announces the slot, then gives up instead of booking."""
    if role == 1:
        return "I have nothing to send."
    return "No emails came." if turn >= 2 else None


def test_one_grpo_step_on_meeting_duo_through_train(duo_step_config, tmp_path, duo_registered):
    """`agentrl train` with the duo config: the warm start's demonstrations are both agents',
    the step trains each agent's trajectory, and the logged episodes are linked teams."""
    from agentrl.train.loop import train

    run = tmp_path / "duo"
    cfg = duo_step_config(run)
    summary = train(cfg, progress=False)
    assert summary["run_dir"] == str(run)
    lines = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 4  # 2 episodes x 2 agents
    assert sorted(x["info"]["agent"] for x in lines) == ["calendar"] * 2 + ["contacts"] * 2
    teams = {x["info"]["team"] for x in lines}
    assert len(teams) == 2
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["rollout/episodes"] == 4 and metrics[0]["rollout/policy_tokens"] > 0
    assert metrics[0]["policy/updates"] >= 1 and metrics[0]["policy/skipped_updates"] == 0
    assert "loss/policy" in metrics[0] and metrics[0]["reward/progress"] >= 0.0
