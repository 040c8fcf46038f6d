"""``LastActions``: each turn's observation lists the episode's last k calls, repeats marked,
and the rollout's token-exact contract holds with the note in the observations."""

import copy

import pytest

from agentrl.chat.render import render_text, stop_token_ids, tokenize
from agentrl.config import load_config
from agentrl.envs import make
from agentrl.envs.reference import run_reference_episode
from agentrl.envs.wrappers import LastActions, last_actions_note
from agentrl.policy.generate import Sample
from agentrl.rollout import EpisodeSpec, run_episodes
from agentrl.train.build import env_factory

PARIS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ROME = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'


def _log(*calls):
    return [{"name": n, "arguments": a, "ok": ok, "error_code": code} for n, a, ok, code in calls]


def test_note_lists_the_last_k_calls_and_marks_repeats():
    log = _log(
        ("get_weather", {"city": "Paris"}, True, None),
        ("get_weather", {"city": "Rome"}, False, "unavailable"),
        ("get_weather", {"city": "Paris"}, True, None),
        ("get_weather", {"city": "Paris"}, True, None),
    )
    assert last_actions_note(log[:1], 3) == (
        '[your last 1 action: 1. get_weather({"city": "Paris"}) -> ok]'
    )
    note = last_actions_note(log, 3)
    assert note == (
        "[your last 3 actions: "
        '1. get_weather({"city": "Rome"}) -> error unavailable; '
        '2. get_weather({"city": "Paris"}) -> ok, a repeat; '  # its twin scrolled out
        '3. get_weather({"city": "Paris"}) -> ok, a repeat of 2]'
    )
    assert last_actions_note([], 3) == ""
    assert last_actions_note(log, 0) == ""


def test_wrapped_env_annotates_the_observation_in_place():
    env = make("weather", fault_rate=0.0, last_actions=3)
    assert isinstance(env, LastActions)
    env.reset(seed=3, options={"level": 1})
    obs, _, terminated, truncated, _ = env.step(PARIS)
    assert not (terminated or truncated) and len(obs) == 1
    note = '[your last 1 action: 1. get_weather({"city": "Paris"}) -> ok]'
    assert obs[0]["content"].endswith(note)
    assert env.messages[-1] is obs[0]  # the history holds the annotated message itself
    obs, *_ = env.step(PARIS)
    assert obs[0]["content"].endswith("-> ok, a repeat of 1]")
    obs, _, terminated, _, info = env.step("It is 20°C in Paris.")
    assert terminated and obs == [] and "termination" in info
    with pytest.raises(ValueError, match="last_actions"):
        make("weather", last_actions=-1)
    with pytest.raises(ValueError, match="k >= 1"):
        LastActions(make("weather"), 0)


def test_reference_demonstrations_carry_the_note_and_still_succeed():
    env = make("weather", fault_rate=0.0, last_actions=3)
    messages, info = run_reference_episode(env, seed=5, level=2)
    assert info["success"]
    tool_turns = [m for m in messages if m["role"] == "tool"]
    assert tool_turns and all("[your last" in m["content"] for m in tool_turns)


def test_config_turns_the_wrapper_on_for_training_envs():
    cfg = load_config(None, ["task.last_actions=2", "task.env_kwargs={fault_rate: 0.0}"])
    env = env_factory(cfg)()
    assert isinstance(env, LastActions) and env.k == 2
    plain = env_factory(load_config(None, []))()
    assert not isinstance(plain, LastActions)


class TwoCallsThenAnswer:
    """Calls Paris, Paris again, then answers; records what it was shown."""

    SCRIPT = [PARIS, PARIS, ROME, "Paris is 20°C."]

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.stop = stop_token_ids(tokenizer)[0]
        self.seen, self.turn = [], 0

    def generate(self, prompts, **kwargs):
        self.seen.append(copy.deepcopy(prompts))
        ids = tokenize(self.tokenizer, self.SCRIPT[self.turn]) + [self.stop]
        self.turn += 1
        return [Sample(list(ids), [-0.5] * len(ids), True) for _ in prompts]


def test_rollout_stays_token_exact_with_the_note(tiny_policy):
    _, tok = tiny_policy
    gen = TwoCallsThenAnswer(tok)
    make_env = lambda: make("weather", fault_rate=0.0, last_actions=3)  # noqa: E731
    (traj,) = run_episodes(gen, make_env, [EpisodeSpec(seed=7, level=1)])
    assert traj.info["turns"] == 4
    text = tok.decode(traj.token_ids, skip_special_tokens=False)
    env = make_env()
    assert text == render_text(tok, traj.messages, env.tool_schemas).rstrip("\n")
    assert "-> ok, a repeat of 1]" in text  # the second Paris call was shown as a repeat
    for k in range(4):  # what the policy saw at turn k is exactly the trajectory's prefix
        prompt = gen.seen[k][0]
        assert traj.token_ids[: len(prompt)] == prompt


def test_eval_summary_counts_episodes_that_repeat_a_call(tiny_policy):
    from agentrl.eval.runner import summarize

    _, tok = tiny_policy
    make_env = lambda: make("weather", fault_rate=0.0)  # noqa: E731
    looped = run_episodes(TwoCallsThenAnswer(tok), make_env, [EpisodeSpec(seed=7, level=1)])
    once = run_episodes(_OneCall(tok), make_env, [EpisodeSpec(seed=7, level=1)])
    assert summarize(looped)["repeated_call_rate"] == 1.0
    assert summarize(once)["repeated_call_rate"] == 0.0
    assert summarize(looped + once + once + once)["repeated_call_rate"] == 0.25


class _OneCall(TwoCallsThenAnswer):
    SCRIPT = [PARIS, "Paris is 20°C."]
