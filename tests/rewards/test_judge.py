"""The LLM judge layer against a scripted OpenAI-compatible judge (an ``httpx.MockTransport``):
exact scores, the cache, timeouts and malformed replies as judge faults (never a score of 0),
relative mode's ranking -> scores; agreement math by hand; and the pipeline against agentrl's
own server with the tiny model as judge."""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("openai")

from agentrl.config import build_config  # noqa: E402
from agentrl.rewards.agreement import cohen_kappa, judge_agreement  # noqa: E402
from agentrl.rewards.judge import JudgeCache, LLMJudge, apply_judge  # noqa: E402
from agentrl.rewards.judge_prompt import parse_score, parse_scores, transcript  # noqa: E402
from agentrl.types import RewardBreakdown, Trajectory  # noqa: E402


def episode(answer: str, group: int = 0, success: bool = False) -> Trajectory:
    messages = [{"role": "system", "content": "be helpful"},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather",
                                                      "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "name": "get_weather", "content": '{"c": 5}'},
                {"role": "assistant", "content": answer}]  # fmt: skip
    reward = RewardBreakdown({"completion": float(success)}, {"completion": 1.0})
    return Trajectory("t", group, messages, [], [], [], [], reward,
                      "success" if success else "failure")  # fmt: skip


class FakeJudge:
    """A scripted judge endpoint: replies by what the request's last attempt says."""

    def __init__(self, reply):
        self.reply, self.requests = reply, []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        text = self.reply(body["messages"][-1]["content"])
        if isinstance(text, Exception):
            raise text
        msg = {"role": "assistant", "content": text}
        return httpx.Response(200, json={
            "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})  # fmt: skip


def make_judge(reply, tmp_path=None, **overrides):
    sets = ["reward.judge.enabled=true", "reward.judge.model=fake", "reward.judge.backoff_s=0",
            *(f"reward.judge.{k}={v}" for k, v in overrides.items())]  # fmt: skip
    cfg = build_config({}, sets).reward.judge
    fake = FakeJudge(reply)
    client = httpx.Client(transport=httpx.MockTransport(fake))
    return LLMJudge(cfg, http_client=client), fake


def by_degrees(content: str):
    """Score 1 when the attempt's answer names 5 C, 0.25 otherwise."""
    return '{"score": 1}' if "5 C" in content.split("Attempt:")[-1] else "Score: 0.25"


def test_absolute_scores_join_the_breakdown_and_the_cache_answers_repeats(tmp_path):
    judge, fake = make_judge(by_degrees, cache_path=str(tmp_path / "cache.jsonl"))
    good, bad = episode("It is 5 C.", success=True), episode("It is sunny.")
    before = (good.reward.total, bad.reward.total)
    m = apply_judge(judge, [good, bad])
    assert good.reward.layers["judge"] == 1.0 and bad.reward.layers["judge"] == 0.25
    assert good.reward.total == pytest.approx(before[0] + 0.5 * 1.0)  # weight 0.5
    assert bad.reward.total == pytest.approx(before[1] + 0.5 * 0.25)
    assert m["judge/requests"] == 2 and m["reward/judge_faults"] == 0
    assert m["judge/score_mean"] == pytest.approx(0.625)
    prompt = fake.requests[0]["messages"][-1]["content"]
    assert "get_weather" in prompt and "Weather in Paris?" in prompt
    again = [episode("It is 5 C."), episode("It is sunny.")]
    m2 = apply_judge(judge, again)
    assert len(fake.requests) == 2 and m2["judge/cache_hits"] == 2  # no new request
    # the file cache outlives the judge: a new one answers from it too
    fresh, fake2 = make_judge(by_degrees, cache_path=str(tmp_path / "cache.jsonl"))
    assert fresh.score(episode("It is 5 C.").messages) == 1.0 and not fake2.requests


def test_timeouts_and_malformed_replies_are_faults_not_zero_scores():
    judge, fake = make_judge(lambda _: httpx.ReadTimeout("slow"), retries=2)
    t = episode("It is 5 C.")
    total = t.reward.total
    m = apply_judge(judge, [t])
    assert "judge" not in t.reward.layers and t.reward.total == total  # left out, not 0
    assert m["reward/judge_faults"] == 1 and m["judge/timeout"] == 1
    assert m["judge/requests"] == 3 and m["judge/retries"] == 2
    replies = iter(["I think it is good", '{"score": 7}', '{"score": 0.5}'])
    judge, fake = make_judge(lambda _: next(replies), retries=2)
    assert judge.score(t.messages) == 0.5 and len(fake.requests) == 3  # two malformed, retried
    judge, _ = make_judge(lambda _: "great answer!", retries=0)
    m = apply_judge(judge, [t])
    assert m["judge/malformed"] == 1 and m["reward/judge_faults"] == 1


def test_a_dead_judge_opens_the_breaker_after_k_failures():
    judge, fake = make_judge(lambda _: httpx.ConnectError("down"), retries=0,
                             breaker_failures=2, concurrency=1)  # fmt: skip
    m = apply_judge(judge, [episode(f"answer {i}") for i in range(5)])
    assert len(fake.requests) == 2  # then refused at once
    assert m["judge/error"] == 2 and m["judge/circuit_open"] == 3
    assert m["reward/judge_faults"] == 5


def test_relative_mode_turns_a_ranking_into_scores():
    def rank(content):  # attempts 1..3: the 5 C answer best, the empty one worst
        return 'Sure. {"ranking": [2, 1, 3]}'

    judge, fake = make_judge(rank, mode="relative")
    group = [episode("sunny"), episode("It is 5 C."), episode("")]
    other = [episode("cold", group=1), episode("5 C", group=1)]
    m = apply_judge(judge, group + other)
    assert [t.reward.layers["judge"] for t in group] == [0.5, 1.0, 0.0]
    # the second group: 3 ranks for 2 attempts, malformed twice (one retry): 2 faults
    assert len(fake.requests) == 3 and m["reward/judge_faults"] == 2
    assert "judge" not in other[0].reward.layers
    assert "Attempt 3:" in fake.requests[0]["messages"][-1]["content"]
    assert parse_scores('{"scores": [0.2, 0.9]}', 2) == [0.2, 0.9]
    assert parse_scores('{"scores": [0.2, 1.5]}', 2) is None


@pytest.mark.parametrize(("text", "score"), [
    ('{"score": 0.7}', 0.7), ("```json\n{\"score\": 1}\n```", 1.0), ("Score: 0.3", 0.3),
    ("0.9", 0.9), ("score = 1.5", None), ("good", None), ('{"score": true}', None), ("", None),
    ('{"verdict": "yes"}', None),
])  # fmt: skip
def test_parse_score(text, score):
    assert parse_score(text) == score


def test_transcript_and_cache_key():
    text = transcript(episode("It is 5 C.").messages)
    assert text.splitlines() == ['assistant calls get_weather({"city": "Paris"})',
                                 'tool get_weather: {"c": 5}', "assistant: It is 5 C."]  # fmt: skip
    assert transcript(episode("x" * 500).messages, max_chars=200).startswith("...")
    assert JudgeCache.key("m", "r", [1]) != JudgeCache.key("m", "r2", [1])


def test_agreement_and_kappa_by_hand():
    # 2x2: tp=20 fp=5 fn=10 tn=15 -> p_o = 0.7, p_e = 0.5*0.6 + 0.5*0.4 = 0.5, kappa 0.4
    assert cohen_kappa(20, 5, 10, 15) == pytest.approx(0.4)
    assert cohen_kappa(3, 0, 0, 0) == 1.0 and cohen_kappa(0, 2, 2, 0) == pytest.approx(-1.0)
    scores = [0.9, 0.6, 0.2, 0.1, None, 0.7]
    success = [True, False, False, True, True, True]
    a = judge_agreement(scores, success, threshold=0.5)
    assert (a["tp"], a["fp"], a["fn"], a["tn"], a["faults"]) == (2, 1, 1, 1, 1)
    assert a["agreement"] == pytest.approx(3 / 5)
    # p_o = 0.6; judge yes 3/5, verifier yes 3/5: p_e = 0.36 + 0.16 = 0.52
    assert a["kappa"] == pytest.approx((0.6 - 0.52) / 0.48)
    none = judge_agreement([None, None], [True, False])
    assert none["faults"] == 2 and none["kappa"] is None and none["agreement"] is None
    with pytest.raises(ValueError, match="2 scores for 1 episodes"):
        judge_agreement([0.1, 0.2], [True])


def test_judge_config_errors_name_the_field():
    from agentrl.config import ConfigError

    with pytest.raises(ConfigError, match="reward.judge.model"):
        build_config({}, ["reward.judge.enabled=true"])
    with pytest.raises(ConfigError, match="reward.judge.mode"):
        build_config({}, ["reward.judge.mode=pairwise"])
    assert "judge" not in build_config({}).reward.weights()


def test_agentrl_serve_as_the_judge(tiny_policy):
    """The tiny model behind agentrl's own server judges: every episode is either scored in
    [0, 1] or counted as a fault (it mostly writes no score), and nothing raises."""
    from agentrl.chat.render import stop_token_ids
    from agentrl.engine.decoder import Engine
    from agentrl.serve import create_app
    from agentrl.serve.background import BackgroundServer

    model, tok = tiny_policy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    srv = BackgroundServer(create_app(engine, "tiny", capacity=2048, slots=4), name="judge")
    url = srv.start()
    try:
        cfg = build_config({}, ["reward.judge.enabled=true", "reward.judge.model=tiny",
                                f"reward.judge.base_url={url}/v1", "reward.judge.retries=0",
                                "reward.judge.max_tokens=8",
                                "reward.judge.max_transcript_chars=300"]).reward.judge  # fmt: skip
        judge = LLMJudge(cfg)
        eps = [episode("It is 5 C."), episode("sunny")]
        m = apply_judge(judge, eps)
        judged = [t.reward.layers["judge"] for t in eps if "judge" in t.reward.layers]
        assert m["judge/requests"] == 2 and m["judge/error"] == 0  # the server answered
        assert m["judge/judged"] + m["reward/judge_faults"] == 2
        assert all(0.0 <= s <= 1.0 for s in judged)
    finally:
        srv.stop()
