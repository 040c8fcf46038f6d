"""``agentrl serve --record``: token-exact session records through the official ``openai``
client, sessions grouped by header or ``user``, the reward route and its 4xx, recorded ids equal
to the engine's own, and a rewritten history split into token-exact segments."""

import json

import httpx
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from agentrl.chat.render import encode_prompt, stop_token_ids  # noqa: E402
from agentrl.engine.decoder import Engine  # noqa: E402
from agentrl.envs import make  # noqa: E402
from agentrl.serve import create_app  # noqa: E402
from agentrl.serve.background import BackgroundServer  # noqa: E402
from agentrl.serve.client import report_reward, reward_url, session_headers  # noqa: E402
from agentrl.serve.episodes import build_segments, session_trajectory  # noqa: E402
from agentrl.serve.record import Recorder, load_sessions  # noqa: E402
from tests.test_serve import ASK, ScriptedSession  # noqa: E402

TOOLS = make("weather").tool_schemas


@pytest.fixture()
def scripted(tiny_policy, tmp_path):
    """A recording server over the scripted session (a weather call, then an answer)."""
    model, tok = tiny_policy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    recorder = Recorder(tok, tmp_path / "rec", keep=True)
    app = create_app(engine, "tiny", capacity=1024, slots=4, session=ScriptedSession(tok),
                     recorder=recorder)  # fmt: skip
    srv = BackgroundServer(app)
    url = srv.start()
    yield {"url": url, "recorder": recorder, "dir": tmp_path / "rec", "tok": tok}
    srv.stop()


def _agent_loop(client, messages, **kw):
    """The usual agent loop: ask, run the tool call, send the result back, get the answer."""
    first = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS,
                                           temperature=0, **kw)  # fmt: skip
    call = first.choices[0].message.tool_calls[0]
    result = {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 5}'}
    history = [*messages, first.choices[0].message.model_dump(exclude_none=True), result]
    final = client.chat.completions.create(model="tiny", messages=history, tools=TOOLS,
                                           temperature=0, **kw)  # fmt: skip
    return history, final


def test_a_session_is_recorded_as_one_token_exact_episode(scripted):
    client = openai.OpenAI(base_url=scripted["url"] + "/v1", api_key="x", max_retries=0,
                           default_headers=session_headers("ep-1"))  # fmt: skip
    _agent_loop(client, ASK)
    # a second episode, grouped by the OpenAI "user" field instead of the header
    plain = openai.OpenAI(base_url=scripted["url"] + "/v1", api_key="x", max_retries=0)
    _agent_loop(plain, ASK, user="ep-2")
    entry = report_reward(scripted["url"] + "/v1", "ep-1", 1.0, success=True)
    assert entry["reward"] == 1.0 and entry["session"] == "ep-1"
    report_reward(scripted["url"], "ep-2", 0.0)  # the root URL works too
    sessions = load_sessions(scripted["dir"])
    assert set(sessions) == {"ep-1", "ep-2"}
    records, reward = sessions["ep-1"]
    assert [r["turn"] for r in records] == [0, 1] and reward["success"] is True
    first, second = records
    assert not first["continued"] and second["continued"]
    # the second prompt is the first prompt + the sampled ids + the tool result as a delta
    assert second["token_ids"][: len(first["token_ids"])] == first["token_ids"]
    assert first["token_ids"][: first["prompt_len"]] == encode_prompt(scripted["tok"], ASK, TOOLS)
    for r in records:
        n = r["prompt_len"]
        assert r["loss_mask"] == [0] * n + [1] * (len(r["token_ids"]) - n)
        assert len(r["logprobs"]) == len(r["token_ids"])
    traj = session_trajectory(records, reward, task_id="t", group_id=0)
    assert traj.termination == "success" and not traj.segments and traj.info["continued"] == 1
    assert traj.token_ids == second["token_ids"]
    sampled = [t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m]
    own = [t for r in records for t, m in zip(r["token_ids"], r["loss_mask"], strict=True) if m]
    assert sampled == own  # both replies trained, nothing else
    assert sorted(set(traj.turn_of_token)) == [-1, 0, 1]
    # kept in memory for a trainer as well
    kept, kept_reward = scripted["recorder"].take("ep-2")
    assert len(kept) == 2 and kept_reward["reward"] == 0.0


def test_rewritten_history_splits_the_episode_into_segments(scripted):
    client = openai.OpenAI(base_url=scripted["url"] + "/v1", api_key="x", max_retries=0,
                           default_headers=session_headers("ep-3"))  # fmt: skip
    history, _ = _agent_loop(client, ASK)
    # the program trims its history: the tool call is summarized into a user message
    rewritten = [*ASK, {"role": "user", "content": "The tool said 5 C. Answer now."}]
    client.chat.completions.create(model="tiny", messages=rewritten, tools=TOOLS, temperature=0)
    records, _ = scripted["recorder"].take("ep-3")
    assert [r["continued"] for r in records] == [False, True, False]
    segments = build_segments(records)
    assert len(segments) == 2
    assert segments[0].token_ids == records[1]["token_ids"]
    assert segments[1].token_ids == records[2]["token_ids"]
    assert segments[1].loss_mask == records[2]["loss_mask"]
    traj = session_trajectory(records, {"reward": 0.5}, task_id="t", group_id=0)
    assert len(traj.segments) == 2 and traj.termination == "success"
    assert traj.num_policy_tokens == sum(sum(r["loss_mask"]) for r in records)
    assert traj.token_ids == records[2]["token_ids"]  # the last context
    unrewarded = session_trajectory(records, None, task_id="t", group_id=0)
    assert unrewarded.termination == "harness_error"


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ([1, 2], 400, None),
        ({"reward": 1.0}, 400, "session"),
        ({"session": "", "reward": 1.0}, 400, "session"),
        ({"session": "s", "reward": "high"}, 400, "reward"),
        ({"session": "s", "reward": True}, 400, "reward"),
        ({"session": "s", "reward": 1.0, "success": "yes"}, 400, "success"),
        ({"session": "s", "reward": 1.0, "bonus": 2}, 400, "bonus"),
        ({"session": "never-seen", "reward": 1.0}, 404, "session"),
    ],
)
def test_bad_reward_reports_get_a_4xx_naming_the_field(scripted, body, status, param):
    r = httpx.post(reward_url(scripted["url"]), json=body, timeout=30)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_reward_errors_for_bad_json_duplicates_and_no_recording(scripted, tiny_policy):
    r = httpx.post(reward_url(scripted["url"]), content=b"{oops", timeout=30,
                   headers={"Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 400
    client = openai.OpenAI(base_url=scripted["url"] + "/v1", api_key="x", max_retries=0)
    client.chat.completions.create(model="tiny", messages=ASK, user="dup", temperature=0)
    report_reward(scripted["url"], "dup", 1.0)
    with pytest.raises(ValueError, match="already has a reward"):
        report_reward(scripted["url"], "dup", 0.0)
    model, tok = tiny_policy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    srv = BackgroundServer(create_app(engine, "tiny", capacity=256, slots=1,
                                      session=ScriptedSession(tok)))  # fmt: skip
    url = srv.start()
    try:
        r = httpx.post(reward_url(url), json={"session": "s", "reward": 1}, timeout=30)
        assert r.status_code == 404 and "--record" in r.json()["error"]["message"]
    finally:
        srv.stop()


def test_recorded_ids_are_the_ids_the_engine_produces(tiny_policy, tmp_path):
    """Through the real decoder: each recorded turn's sampled ids and log-probs equal
    ``Engine.generate`` greedy on the recorded prompt, and a continued turn's prompt extends
    the previous turn's ids."""
    model, tok = tiny_policy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    recorder = Recorder(tok, tmp_path, keep=True)
    srv = BackgroundServer(create_app(engine, "tiny", capacity=1024, slots=4,
                                      recorder=recorder))  # fmt: skip
    url = srv.start()
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0,
                               default_headers=session_headers("real"))  # fmt: skip
        first = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS,
                                               temperature=0, max_tokens=48)  # fmt: skip
        history = [*ASK, first.choices[0].message.model_dump(exclude_none=True)]
        calls = first.choices[0].message.tool_calls or []
        history += [{"role": "tool", "tool_call_id": c.id, "content": '{"temperature_c": 5}'}
                    for c in calls] or [{"role": "user", "content": "And in Oslo?"}]  # fmt: skip
        client.chat.completions.create(model="tiny", messages=history, tools=TOOLS,
                                       temperature=0, max_tokens=24)  # fmt: skip
    finally:
        srv.stop()
    records, _ = recorder.take("real")
    assert len(records) == 2
    for rec, budget in zip(records, (48, 24), strict=True):
        prompt = rec["token_ids"][: rec["prompt_len"]]
        (want,) = engine.generate([prompt], max_new_tokens=budget, greedy=True)
        assert rec["token_ids"][rec["prompt_len"] :] == want.ids
        assert rec["logprobs"][rec["prompt_len"] :] == pytest.approx(want.logprobs, abs=1e-4)
    if records[0]["token_ids"][-1] in stop_token_ids(tok)[:1]:  # a turn a delta can follow
        assert records[1]["continued"]
        assert records[1]["token_ids"][: len(records[0]["token_ids"])] == records[0]["token_ids"]
    line = json.loads((tmp_path / "records.jsonl").read_text().splitlines()[0])
    assert line["token_ids"] == records[0]["token_ids"]


def test_streamed_and_n_choice_requests_are_recorded(scripted):
    """A streamed turn is recorded before ``[DONE]`` (the follow-up continues it); each of
    ``n`` choices is a record, and the one the program kept is the one continued."""
    client = openai.OpenAI(base_url=scripted["url"] + "/v1", api_key="x", max_retries=0,
                           default_headers=session_headers("ep-s"))  # fmt: skip
    chunks = list(client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS,
                                                 temperature=0, stream=True))  # fmt: skip
    (call,) = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function", "function": call.function.model_dump()}]}  # fmt: skip
    history = [*ASK, reply, {"role": "tool", "tool_call_id": call.id, "content": '{"c": 5}'}]
    many = client.chat.completions.create(model="tiny", messages=history, tools=TOOLS, n=2,
                                          temperature=0)  # fmt: skip
    assert len(many.choices) == 2
    records, _ = scripted["recorder"].take("ep-s")
    assert [(r["turn"], r["choice"], r["continued"]) for r in records] == [
        (0, 0, False), (1, 0, True), (1, 1, True)]  # fmt: skip
    segments = build_segments(records)  # the second choice shares the prompt: its own segment
    assert [len(s.token_ids) for s in segments] == [len(records[1]["token_ids"]),
                                                   len(records[2]["token_ids"])]  # fmt: skip
