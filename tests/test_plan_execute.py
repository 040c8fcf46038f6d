"""Plan-and-execute (``agentrl.planning.plan``): plans parsed and scored against the sub-tasks,
the wrapper's turns, re-planning, credit in the breakdown, token-exact rollouts, snapshots."""

import copy

import pytest

from agentrl.chat.render import render_text, stop_token_ids, tokenize
from agentrl.config import load_config
from agentrl.envs import list_envs, make
from agentrl.envs.reference import run_reference_episode
from agentrl.eval.runner import summarize
from agentrl.planning import PlanExecute, decomposition_accuracy, parse_plan, plan_text
from agentrl.policy.generate import Sample
from agentrl.rollout import EpisodeSpec, run_episodes
from agentrl.train.build import env_factory
from agentrl.types import ToolCall

CALLS = [ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})]
ASK = "Which city is warmer today: Paris or Rome?"


def test_plans_are_parsed_and_scored_in_order():
    assert parse_plan("Plan:\n1. get_weather(city=Paris)\n2) answer") == [
        "get_weather(city=Paris)",
        "answer",
    ]
    assert parse_plan("Paris is warmer.") is None
    assert plan_text(CALLS, ASK) == (
        "Plan:\n1. get_weather(city=Paris)\n2. get_weather(city=Rome)\n3. answer"
    )
    assert decomposition_accuracy(parse_plan(plan_text(CALLS, ASK)), CALLS, ASK) == 1.0
    out_of_order = ["get_weather(city=Rome)", "get_weather(Paris)"]
    assert decomposition_accuracy(out_of_order, CALLS, ASK) == 0.5
    assert decomposition_accuracy(["look up the weather in Paris"], CALLS, ASK) == 0.0
    assert decomposition_accuracy(None, CALLS, ASK) == 0.0
    assert decomposition_accuracy([], [], ASK) == 1.0
    # a value only a tool result reveals is not asked of the plan, nor shown in the reference
    book = [ToolCall("book", {"room": "R-12", "person": "Lena"})]
    assert plan_text(book, "Book a room for Lena.") == "Plan:\n1. book(person=Lena)\n2. answer"
    assert decomposition_accuracy(["book(Lena)"], book, "Book a room for Lena.") == 1.0
    assert decomposition_accuracy(["book(Nadia)"], book, "Book a room for Lena.") == 0.0


@pytest.mark.parametrize("env_id", [e for e in list_envs() if e not in ("math", "arith_code")])
def test_reference_plans_score_full_decomposition_on_every_family(env_id):
    env = make(env_id, plan_execute=True)
    messages, info = run_reference_episode(env, seed=5, level=2)
    assert info["success"] and info["reward"].layers["plan"] == 1.0
    assert messages[0]["role"] == "system" and "First write a plan" in messages[0]["content"]
    assert messages[3] == {"role": "user", "content": messages[3]["content"]}
    assert messages[3]["content"].startswith("Plan noted")
    instance = env.instance
    assert env.plan == parse_plan(plan_text(list(instance.expected_calls), instance.prompt))


def test_a_turn_that_skips_the_plan_is_executed_and_scores_no_plan():
    env = make("weather", fault_rate=0.0, plan_execute=True)
    env.reset(seed=2, options={"level": 1})
    city = env.instance.data["cities"][0]
    call = f'{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}'
    call = f"<tool_call>\n{call}\n</tool_call>"
    obs, _, _, _, info = env.step(call)
    assert obs[0]["role"] == "tool" and info["turn"] == 1
    _, reward, terminated, _, info = env.step("It is 1°C.")
    assert terminated and info["reward"].layers["plan"] == 0.0
    assert reward == pytest.approx(info["reward"].total)
    assert "plan" in info["reward"].weights


def test_a_failed_call_opens_one_replan():
    env = make("weather", fault_rate=0.0, plan_execute=True)
    env.reset(seed=2, options={"level": 1})
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Atlantis"}}\n</tool_call>'
    env.step("Plan:\n1. get_weather(city=Atlantis)\n2. answer")
    env.step(bad)
    obs, *_, info = env.step("Plan:\n1. get_weather(city=Paris)")  # the re-plan
    assert info["plan"] == ["get_weather(city=Paris)"] and info["turn"] == 3
    env.step(bad)
    _, _, terminated, _, _ = env.step("1. a second re-plan is an answer")
    assert terminated and len(env.plans) == 2
    assert env.max_turns == 6 + 1 + 1


def test_config_mode_plan_execute_builds_the_wrapper_and_snapshots_replay_the_plan():
    cfg = load_config(None, ["rollout.mode=plan_execute", "task.env_kwargs={fault_rate: 0.0}"])
    env = env_factory(cfg)()
    assert isinstance(env, PlanExecute)
    env.reset(seed=4, options={"level": 2})
    env.step(env.reference_action())  # the plan
    env.step(env.reference_action())  # the first call
    snap = env.snapshot()
    assert snap.turn == 2
    fresh = env_factory(cfg)()
    assert fresh.restore(snap) == [dict(m) for m in env.messages]
    assert fresh.plan == env.plan
    with pytest.raises(ValueError, match="rollout.mode"):
        load_config(None, ["rollout.mode=plan"])


class PlanThenSolve:
    """Plans, calls the tool for ``city``, answers; records the prompts it saw."""

    def __init__(self, tokenizer, city):
        self.tokenizer, self.stop = tokenizer, stop_token_ids(tokenizer)[0]
        call = f'{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}'
        self.script = [f"Plan:\n1. get_weather(city={city})\n2. answer",
                       f"<tool_call>\n{call}\n</tool_call>", "It is 3°C."]  # fmt: skip
        self.seen, self.turn = [], 0

    def generate(self, prompts, **kwargs):
        self.seen.append(copy.deepcopy(prompts))
        ids = tokenize(self.tokenizer, self.script[self.turn]) + [self.stop]
        self.turn += 1
        return [Sample(list(ids), [-0.5] * len(ids), True) for _ in prompts]


def test_plan_execute_rollout_is_token_exact(tiny_policy):
    _, tok = tiny_policy
    make_env = lambda: make("weather", fault_rate=0.0, plan_execute=True)  # noqa: E731
    probe = make_env()
    probe.reset(seed=9, options={"level": 1})
    gen = PlanThenSolve(tok, probe.instance.data["cities"][0])
    (traj,) = run_episodes(gen, make_env, [EpisodeSpec(seed=9, level=1)])
    assert traj.info["turns"] == 3 and traj.info["plans"] == [[gen.script[0].split("\n")[1][3:],
                                                                "answer"]]  # fmt: skip
    text = tok.decode(traj.token_ids, skip_special_tokens=False)
    assert text == render_text(tok, traj.messages, probe.tool_schemas).rstrip("\n")
    for k in range(3):
        assert traj.token_ids[: len(gen.seen[k][0])] == gen.seen[k][0]
    assert set(traj.turn_of_token) == {-1, 0, 1, 2}
    assert [c["turn"] for c in traj.tool_calls] == [1]  # the call is the second turn
    per_turn = traj.reward.per_turn  # one entry per assistant turn, the plan's first
    assert len(per_turn) == 3 and "tool_choice" not in per_turn[0] and "tool_choice" in per_turn[1]
    report = summarize([traj])
    assert report["decomposition_accuracy"] == 1.0 and report["planned_rate"] == 1.0


def test_eval_curve_points_carry_the_planning_figures():
    from agentrl.train.run import curve_point, eval_metrics

    summary = {"success_rate": 0.5, "success_by_level": {"1": 0.5}, "mean_tool_calls": 1.0,
               "terminations": {}, "repeated_call_rate": 0.25, "decomposition_accuracy": 0.75,
               "planned_rate": 1.0}  # fmt: skip
    point = curve_point(3, 96, summary)
    assert point["decomposition_accuracy"] == 0.75 and point["repeated_call_rate"] == 0.25
    metrics = eval_metrics(point)
    assert metrics["eval/decomposition_accuracy"] == 0.75
    assert metrics["eval/planned_rate"] == 1.0
    plan_keys = ("decomposition_accuracy", "planned_rate")
    react = curve_point(3, 96, {k: v for k, v in summary.items() if k not in plan_keys})
    assert "decomposition_accuracy" not in react and "eval/planned_rate" not in eval_metrics(react)


def test_call_decomposition_scores_the_calls_made_in_order():
    from agentrl.eval.decomposition import call_decomposition, call_steps
    from agentrl.eval.runner import eval_specs
    from agentrl.types import RewardBreakdown, Trajectory

    make_env = lambda: make("weather", max_turns=6)  # noqa: E731
    specs = eval_specs(4, [2], 10_000)  # level 2: two cities to look up
    instances = []
    for spec in specs:
        env = make_env()
        env.reset(seed=spec.seed, options={"level": spec.level})
        instances.append(env.instance)
    assert all(len(i.expected_calls) == 2 for i in instances)

    def traj(calls):
        made = [{"name": c.name, "arguments": c.arguments} for c in calls]
        return Trajectory("weather", 0, [], [], [], [], [], RewardBreakdown(), "failure",
                          tool_calls=made)  # fmt: skip

    first, second = instances[0].expected_calls, instances[1].expected_calls
    trajs = [
        traj(list(first)),  # both, in order: 1.0
        traj([second[1], second[1]]),  # the second city twice, never the first: 0.5
        traj([]),  # no call: 0.0
        traj([ToolCall("get_local_time", {"city": c.arguments["city"]}) for c in first]),  # 0.0
    ]
    got = call_decomposition(trajs, specs, make_env)
    assert got == {
        "call_decomposition_accuracy": pytest.approx((1.0 + 0.5 + 0.0 + 0.0) / 4),
        # the first call names get_weather in the first two episodes only
        "first_tool_rate": 0.5,
        "first_tool_by_level": {"2": 0.5},
    }
    assert call_steps([{"name": "get_weather", "arguments": {"city": "Paris"}}]) == [
        'get_weather {"city": "Paris"}'
    ]
