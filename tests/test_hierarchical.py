"""Hierarchical RL (``rollout.mode: hierarchical``): subgoals from the reference solver, the
manager / worker rollout on a scripted policy (each context's messages, results passed back,
limits), token-exact segments, subgoal rewards, the two-time-scale advantages, a GRPO run."""

import copy
import json

import pytest
import torch

from agentrl.algos.batch import build_batch
from agentrl.algos.hierarchical import (
    hierarchical_signals,
    manager_trains,
    row_advantages,
    row_roles,
    worker_advantages,
)
from agentrl.algos.segments import segment_rows
from agentrl.chat.render import render_text, stop_token_ids, tokenize
from agentrl.config import ConfigError, build_config
from agentrl.config.hierarchy import HierarchyConfig
from agentrl.envs import make
from agentrl.envs.tasks.weather import SYSTEM_PROMPT
from agentrl.planning.hier_rollout import run_hierarchical
from agentrl.planning.hierarchy import (
    MANAGER_PROMPT,
    NO_TOOLS,
    WORKER_PROMPT,
    Hierarchy,
    hierarchical_demos,
    parse_subgoal,
    worker_result,
)
from agentrl.planning.subgoals import subgoal_groups, subgoal_reward, subgoal_target, subgoal_text
from agentrl.policy.generate import Sample
from agentrl.rollout import EpisodeSpec
from agentrl.types import RewardBreakdown, Segment, ToolCall, Trajectory

ASK = "Which city is warmer today: Paris or Rome?"
PARIS, ROME = ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})


def _call(city: str) -> str:
    return (
        f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}\n</tool_call>'
    )


def test_subgoals_group_the_reference_calls_and_lines_name_their_targets():
    groups = subgoal_groups([PARIS, ROME], ASK)
    assert groups == [[PARIS], [ROME]]
    assert [subgoal_text(g, ASK) for g in groups] == ["get_weather(city=Paris)",
                                                      "get_weather(city=Rome)"]  # fmt: skip
    # a call whose arguments only a result reveals joins the subgoal before it
    book = [ToolCall("find_slot", {"person": "Lena"}), ToolCall("book", {"room": "R-12"})]
    prompt = "Book a room for Lena."
    assert subgoal_groups(book, prompt) == [book]
    assert subgoal_text(book, prompt) == "find_slot(person=Lena) then book()"
    assert subgoal_target("look up the weather in Rome", groups, ASK) == 1  # words alone
    assert subgoal_target("get_weather(city=Paris)", groups, ASK, done=[0]) == 0  # all done
    assert subgoal_target("get_local_time(city=Oslo)", groups, ASK) is None
    timezone = [[ToolCall("tz", {"person": "Lena"})], [ToolCall("busy", {"person": "Lena"})]]
    assert subgoal_target("busy(person=Lena)", timezone, prompt) == 1  # tool and words first
    assert parse_subgoal("Subgoal: get_weather(city=Paris)\nmore") == "get_weather(city=Paris)"
    assert parse_subgoal("Paris is warmer.") is None
    assert worker_result("subgoal done: 12°C") == "12°C" and worker_result("12°C") == "12°C"


def test_subgoal_rewards_on_hand_made_worker_segments():
    ok = {"name": "get_weather", "arguments": {"city": " paris"}, "ok": True}
    failed = {"name": "get_weather", "arguments": {"city": "Paris"}, "ok": False}
    fine = [{"format": 1.0, "repeat": 0.0}]
    r = subgoal_reward([PARIS], [failed, ok], fine * 2, finished=True)
    assert r.layers == {"calls": 1.0, "format": 1.0, "finished": 1.0, "repeat": 0.0}
    assert r.total == pytest.approx(1.2)
    # the wrong city, a malformed turn, a repeat, the turn limit: 0 + 0.1 * 0.5 - 0.1
    rome = {"name": "get_weather", "arguments": {"city": "Rome"}, "ok": True}
    turns = [{"format": 1.0, "repeat": 0.0}, {"format": 0.0, "repeat": 1.0}]
    assert subgoal_reward([PARIS], [rome], turns, finished=False).total == pytest.approx(-0.05)
    # a subgoal that names no needed call: the share of the worker's calls that succeeded
    assert subgoal_reward(None, [rome, failed], fine, finished=True).layers["calls"] == 0.5
    assert subgoal_reward(None, [], [], finished=True).total == pytest.approx(0.1)


def _weather(level: int = 2, seed: int = 9):
    env = make("weather", fault_rate=0.0)
    env.reset(seed=seed, options={"level": level})
    return env.instance


def test_hierarchy_turns_limits_and_the_reference_solve_every_level():
    cfg = HierarchyConfig(max_subgoals=2, worker_turns=2)
    h = Hierarchy(make("weather", fault_rate=0.0), cfg)
    manager, _ = h.reset(seed=9, options={"level": 2})
    assert manager.messages[0]["content"] == f"{SYSTEM_PROMPT}\n{MANAGER_PROMPT}"
    assert h.act(_call("Paris")).kind == "continue"  # the manager may not call tools
    assert manager.messages[-1] == {"role": "user", "content": NO_TOOLS}
    assert h.act("Subgoal: get_weather(city=Oslo)").kind == "open"
    assert h.act("subgoal done: nothing").kind == "resume"
    assert h.act("Subgoal: again").kind == "open"
    assert h.act("subgoal done").kind == "resume"
    assert manager.messages[-1]["content"] == "Result: subgoal done"
    out = h.act("Subgoal: a third one")  # past max_subgoals
    assert out.kind == "end" and out.termination == "max_turns"
    assert [w["type"] for w in h.workers] == ["other", "other"]
    for level in (1, 2, 3):
        env = make("weather")  # faults on: retried inside the workers
        for k, c in enumerate(  # noqa: B007 (k: the last index)
            hierarchical_demos(lambda e=env: e, 1, [level], 20, HierarchyConfig())
        ):
            assert c[0][0]["content"].endswith(WORKER_PROMPT if c[1] else MANAGER_PROMPT)
        assert env.termination == "success" and k == level  # `level` workers, then the manager


class Script:
    """Replies from a list, in order; records every prompt it was asked to continue."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.stop = tokenizer, stop_token_ids(tokenizer)[0]
        self.replies, self.seen = list(replies), []

    def generate(self, prompts, **kwargs):
        self.seen += copy.deepcopy(prompts)
        out = []
        for _ in prompts:
            ids = tokenize(self.tokenizer, self.replies.pop(0)) + [self.stop]
            out.append(Sample(ids, [-0.5] * len(ids), True))
        return out


def test_manager_and_worker_contexts_are_token_exact_segments(tiny_policy):
    _, tok = tiny_policy
    inst = _weather()
    a, b = inst.data["cities"]
    ta, tb = (inst.data["world"][c]["temperature_c"] for c in (a, b))
    answer = (f"{a} is warmer: {ta}°C vs {tb}°C in {b}." if ta > tb
              else f"{b} is warmer: {tb}°C vs {ta}°C in {a}.")  # fmt: skip
    replies = [f"Subgoal: get_weather(city={a})", _call(a), f"subgoal done: {a} {ta}",
               f"Subgoal: look up {b}", _call(b), _call(b), answer]  # fmt: skip
    gen = Script(tok, replies)
    make_env = lambda: make("weather", fault_rate=0.0)  # noqa: E731
    cfg = HierarchyConfig(worker_turns=2)
    (traj,) = run_hierarchical(gen, make_env, [EpisodeSpec(seed=9, level=2)], cfg)
    assert traj.termination == "success" and not gen.replies
    w1, w2, manager = traj.segments
    tools = make_env().tool_schemas
    result_b = json.dumps({"city": b, "temperature_c": tb, "condition":
                           inst.data["world"][b]["condition"]})  # fmt: skip
    assert [m["content"] for m in manager.messages[1:]] == [
        inst.prompt, replies[0], f"Result: {a} {ta}", replies[3],
        f"Result: not finished after 2 turns; last: {result_b}", answer]  # fmt: skip
    assert w1.messages[1] == {"role": "user", "content": f"Subgoal: get_weather(city={a})"}
    assert w1.messages[0]["content"] == f"{SYSTEM_PROMPT}\n{WORKER_PROMPT}"
    assert [m["role"] for m in w2.messages] == ["system", "user", "assistant", "tool", "assistant"]
    for seg, schemas in ((w1, tools), (w2, tools), (manager, None)):
        text = tok.decode(seg.token_ids, skip_special_tokens=False)
        assert text == render_text(tok, seg.messages, schemas).rstrip("\n")
        trained = [t for t, m in zip(seg.token_ids, seg.loss_mask, strict=True) if m]
        assert sum(seg.loss_mask) == len(trained) > 0
        assert all(lp == -0.5 for lp, m in zip(seg.logprobs, seg.loss_mask, strict=True) if m)
    # each turn continued exactly the ids its context holds
    order = [manager, w1, w1, manager, w2, w2, manager]
    for prompt, seg in zip(gen.seen, order, strict=True):
        assert seg.token_ids[: len(prompt)] == prompt
    assert traj.token_ids == manager.token_ids and traj.messages == manager.messages
    assert sorted(set(manager.turn_of_token)) == [-1, 0, 3, 6]
    assert [c["turn"] for c in traj.tool_calls] == [1, 4, 5]
    roles = traj.info["hierarchy"]
    assert [(r["role"], r.get("type"), r.get("finished")) for r in roles] == [
        ("worker", "get_weather", True),
        ("worker", "get_weather", False),
        ("manager", None, None),
    ]
    assert [r["reward"] for r in roles[:2]] == pytest.approx([1.2, 1.0])  # b: repeat, unfinished
    rows, owner = segment_rows([traj])
    assert len(rows) == 3 and owner.tolist() == [0, 0, 0]


def _episode(group: int, reward: float, workers: list[tuple[str, float]]) -> Trajectory:
    seg = Segment([1, 2, 3], [0, 1, 1], [0.0, -0.1, -0.1], [-1, 0, 0])
    roles = [{"role": "worker", "type": t, "reward": r} for t, r in workers]
    return Trajectory("t", group, [], [1, 2, 3], [0, 1, 1], [0.0, -0.1, -0.1], [-1, 0, 0],
                      RewardBreakdown({"completion": reward}, {"completion": 1.0}), "success",
                      info={"hierarchy": [*roles, {"role": "manager"}]},
                      segments=[seg] * (len(workers) + 1))  # fmt: skip


def test_two_time_scale_advantages_by_hand():
    trajs = [_episode(0, 1.0, [("get_weather", 1.2), ("get_weather", 1.0)]),
             _episode(0, 0.0, [("get_weather", 0.2), ("other", 0.5)])]  # fmt: skip
    roles = row_roles(trajs)
    assert roles.is_manager.tolist() == [False, False, True, False, False, True]
    assert roles.keys == ("get_weather", "other")
    assert roles.worker_key.tolist() == [0, 0, -1, 0, 1, -1]
    valid = torch.ones(6, dtype=torch.bool)
    # get_weather: mean 0.8 -> 0.4, 0.2, -0.6; 'other' is alone -> 0
    raw = worker_advantages(roles.worker_reward, roles.worker_key, valid, scale=False)
    assert raw.tolist() == pytest.approx([0.4, 0.2, 0.0, -0.6, 0.0, 0.0])
    std = (0.56 / 3) ** 0.5  # population std of 1.2, 1.0, 0.2
    scaled = worker_advantages(roles.worker_reward, roles.worker_key, valid)
    assert scaled[0].item() == pytest.approx(0.4 / std, rel=1e-5)
    owner = torch.tensor([0, 0, 0, 1, 1, 1])
    episode = torch.tensor([1.0, -1.0])
    on = row_advantages(episode, owner, roles.is_manager, raw, manager_on=True,
                        manager_weight=0.5, worker_weight=2.0)  # fmt: skip
    assert on.tolist() == pytest.approx([0.8, 0.4, 0.5, -1.2, 0.0, -0.5])
    off = row_advantages(episode, owner, roles.is_manager, raw, manager_on=False)
    assert off.tolist() == pytest.approx([0.4, 0.2, 0.0, -0.6, 0.0, 0.0])
    assert [manager_trains(s, 2) for s in range(4)] == [True, False, True, False]
    # group baseline: all four workers of group 0 together (mean 0.725)
    by_group = row_roles(trajs, "group")
    assert by_group.keys == ("group 0",)
    grouped = worker_advantages(by_group.worker_reward, by_group.worker_key, valid, scale=False)
    assert grouped.tolist() == pytest.approx([0.475, 0.275, 0.0, -0.525, -0.225, 0.0])


def test_off_steps_clear_the_manager_rows_from_the_loss():
    trajs = [_episode(0, 1.0, [("get_weather", 1.2)]), _episode(0, 0.0, [("get_weather", 0.2)])]
    rows, owner = segment_rows(trajs)
    batch = build_batch(rows, torch.ones(len(rows), dtype=torch.bool), pad_id=0)
    valid = torch.ones(2, dtype=torch.bool)
    h = HierarchyConfig(manager_every=3)
    for step, manager_rows in ((0, [1.0, 1.0]), (1, [0.0, 0.0]), (3, [1.0, 1.0])):
        out, adv, m = hierarchical_signals(trajs, batch, torch.tensor([1.0, -1.0]), owner, valid,
                                           step, h, scale=False)  # fmt: skip
        assert out.mask[:, 1].tolist() == [1.0, manager_rows[0], 1.0, manager_rows[1]]
        assert adv.tolist() == pytest.approx([0.5, manager_rows[0], -0.5, -manager_rows[1]])
        assert m["hier/manager_trained"] == float(step % 3 == 0)
        assert m["hier/subgoal_reward"] == pytest.approx(0.7)


@pytest.mark.parametrize("clash, field", [
    ("algo.name=ppo", "algo.name=grpo"), ("algo.name=dpo", "algo.name=grpo"),
    ("rollout.max_staleness=1", "rollout.max_staleness > 0"),
    ("rollout.memory.enabled=true", "rollout.memory.enabled=true"),
    ("rollout.search_k=2", "rollout.search_k > 1"),
    ("rollout.backend=ray", "rollout.backend=ray"),
])  # fmt: skip
def test_unsupported_combinations_fail_at_config_time(clash, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.").replace(">", ">")):
        build_config({}, ["rollout.mode=hierarchical", clash])
    with pytest.raises(ConfigError, match="manager_every"):
        build_config({}, ["rollout.mode=hierarchical", "rollout.hierarchy.manager_every=0"])
    assert build_config({}, ["rollout.mode=hierarchical"]).rollout.hierarchy.manager_every == 2


class Forcing:
    """The real generator, except that a manager's first turn becomes ``Subgoal:
    get_weather(city=<the first city asked>)``, and a worker's first turn that call when its
    first sampled id is even (the fixture model writes neither on its own); forced ids get the
    model's own log-probs."""

    supports_sessions = False

    def __init__(self, inner):
        object.__setattr__(self, "inner", inner)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        setattr(self.inner, name, value)

    def generate(self, prompts, **kwargs):
        from agentrl.envs.tasks.weather import CITIES
        from agentrl.policy.logprobs import token_logprobs

        samples, tok, out = self.inner.generate(prompts, **kwargs), self.inner.tokenizer, []
        for prompt, sample in zip(prompts, samples, strict=True):
            text = tok.decode(prompt)
            first = text.count("<|im_start|>assistant") == 1
            user = text.split("<|im_start|>user")[1]
            city = min((c for c in CITIES if c in user), key=user.index, default=None)
            worker = "You are a worker" in text
            coin = not worker or (sample.ids and sample.ids[0] % 2 == 0)
            if not (first and city and coin):
                out.append(sample)
                continue
            reply = _call(city) if worker else f"Subgoal: get_weather(city={city})"
            ids = tokenize(tok, reply) + [self.inner.stop_ids[0]]
            with torch.no_grad():
                logits = self.inner.model(input_ids=torch.tensor([prompt + ids])).logits
                lps = token_logprobs(logits[:, len(prompt) - 1 : -1], torch.tensor([ids]),
                                     kwargs.get("temperature", 1.0))[0].tolist()  # fmt: skip
            out.append(Sample(ids, lps, True))
        return out


def test_a_hierarchical_grpo_run_end_to_end(tiny_dir, tmp_path, monkeypatch):
    from runhelpers import tiny_run_overrides

    from agentrl.policy.loading import load_policy
    from agentrl.train import loop, train

    real = loop.load_generator
    monkeypatch.setattr(
        loop, "load_generator", lambda cfg: (lambda m, t, g, d: (m, t, Forcing(g), d))(*real(cfg))
    )
    run = tmp_path / "run"
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, run), "rollout.mode=hierarchical",
                            "rollout.group_size=4", "rollout.max_new_tokens=16",
                            "rollout.max_total_tokens=700", "task.max_turns=3", "train.steps=2",
                            "train.warmstart_demos=1", "train.warmstart_epochs=1",
                            "train.eval_episodes=2", "train.general_check=false",
                            "rollout.hierarchy.worker_turns=1", "rollout.hierarchy.max_subgoals=1",
                            "algo.minibatches=1", "algo.kl.coef=0.05"])  # fmt: skip
    before, _ = load_policy(str(tiny_dir))
    summary = train(cfg, progress=False)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["hier/manager_trained"] for m in lines] == [1.0, 0.0]  # manager_every = 2
    assert all(m["hier/worker_rows"] > 0 for m in lines)
    episodes = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert all(e["info"]["hierarchy"][-1]["role"] == "manager" for e in episodes)
    assert any(e["num_segments"] > 1 for e in episodes)
    evaluated = [json.loads(x) for x in (run / "eval_after.jsonl").read_text().splitlines()]
    assert len(evaluated) == 2 and all("hierarchy" in e["info"] for e in evaluated)
    after, _ = load_policy(str(run / "model"))
    moved = sum(float((a - b).detach().abs().sum()) for a, b in
                zip(after.parameters(), before.parameters(), strict=True))  # fmt: skip
    assert moved > 0 and summary["success_after"] in (0.0, 0.5, 1.0)


def test_an_agent_program_is_refused_in_hierarchical_mode(tmp_path):
    from agentrl.train import train
    from agentrl.train.agent import AgentProgram

    cfg = build_config({}, [f"train.run_dir={tmp_path / 'run'}", "rollout.mode=hierarchical"])
    with pytest.raises(ValueError, match="rollout.mode=hierarchical"):
        train(cfg, progress=False, agent=AgentProgram("python -c pass"))


def test_a_hierarchical_evaluation_reports_each_finished_episode(tiny_policy):
    """``evaluate(hierarchy=..., on_episode=...)`` counts finished manager episodes over its
    batches, as the flat evaluation does (training's progress lines)."""
    from agentrl.eval.runner import evaluate

    _, tok = tiny_policy
    seen: list[tuple[int, int]] = []
    record = lambda n, total: seen.append((n, total))  # noqa: E731
    make_env = lambda: make("weather", fault_rate=0.0)  # noqa: E731
    _, played = evaluate(Script(tok, ["I cannot tell."] * 3), make_env, episodes=3, levels=[1],
                         seed0=3, batch_size=2, hierarchy=HierarchyConfig(),
                         on_episode=record)  # fmt: skip
    assert len(played) == 3 and seen == [(1, 3), (2, 3), (3, 3)]
