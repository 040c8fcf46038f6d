"""``agentrl serve`` against the official ``openai`` client on loopback: a tool-call round trip
(the tiny model taught one call), streaming with tool-call deltas, n and stop, concurrent
requests batched together, every bad input a 4xx naming the field, the API key enforced."""

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")

from agentrl.chat.render import stop_token_ids  # noqa: E402
from agentrl.engine.decoder import Engine  # noqa: E402
from agentrl.envs import make  # noqa: E402
from agentrl.policy.generate import Sample  # noqa: E402
from agentrl.serve import create_app  # noqa: E402
from agentrl.serve.background import BackgroundServer  # noqa: E402

KEY = "sk-test"
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}


CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWER = "It is 5 C in Paris."


class ScriptedSession:
    """A decode session that plays a fixed turn one token per step: the weather call for a
    question, the answer once a tool result is in the prompt (``DecodeSession``'s interface)."""

    def __init__(self, tok):
        self.tok, self.stop = tok, stop_token_ids(tok)[0]
        self.seqs: dict = {}

    def add(self, key, prompt, max_new, seed, sampling=None, constraint=None):
        text = self.tok.decode(prompt)
        script = ANSWER if "<tool_response>" in text.split("<|im_start|>user")[-1] else CALL_TEXT
        self.seqs[key] = [self.tok.encode(script) + [self.stop], [], max_new]

    @property
    def busy(self):
        return bool(self.seqs)

    def step(self):
        ended = []
        for key, (script, done, max_new) in list(self.seqs.items()):
            done.append(script[len(done)])
            if done[-1] == self.stop or len(done) >= max_new:
                ended.append((key, Sample(list(done), [-0.1] * len(done), done[-1] == self.stop)))
        return ended

    def partial(self, key):
        return list(self.seqs[key][1]) if key in self.seqs else []

    def release(self, key):
        self.seqs.pop(key, None)


@pytest.fixture(scope="module")
def server(tiny_policy):
    """A server on a free loopback port: the protocol over a scripted decode session."""
    model, tok = tiny_policy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    app = create_app(engine, "tiny", capacity=1024, slots=8, api_key=KEY,
                     session=ScriptedSession(tok))  # fmt: skip
    srv = BackgroundServer(app, name="test-serve")
    url = srv.start()
    yield {"url": url, "tools": make("weather").tool_schemas, "app": app}
    srv.stop()


@pytest.fixture(scope="module")
def real_server(tiny_policy):
    """The same over the real engine: the tiny model in a continuously batched session."""
    model, tok = tiny_policy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    app = create_app(engine, "tiny", capacity=1024, slots=4)
    srv = BackgroundServer(app, name="test-serve")
    url = srv.start()
    yield {"url": url, "app": app, "engine": engine}
    srv.stop()


def _client(server, key=KEY):
    return openai.OpenAI(base_url=server["url"] + "/v1", api_key=key, max_retries=0)


def test_tool_call_round_trip(server):
    client = _client(server)
    assert [m.id for m in client.models.list().data] == ["tiny"]
    reply = client.chat.completions.create(model="tiny", messages=ASK, tools=server["tools"],
                                           temperature=0)  # fmt: skip
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert reply.usage.prompt_tokens > 100 and reply.usage.completion_tokens > 5
    # the tool's result goes back as OpenAI sends it; the model answers in words
    history = [*ASK, choice.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": '{"c": 5}'}]  # fmt: skip
    final = client.chat.completions.create(model="tiny", messages=history,
                                           tools=server["tools"], temperature=0)  # fmt: skip
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content == ANSWER


def test_streaming_sends_content_then_tool_call_deltas(server):
    client = _client(server)
    chunks = list(client.chat.completions.create(model="tiny", messages=ASK, stream=True,
                                                 tools=server["tools"], temperature=0))  # fmt: skip
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.index, tc.function.name) for tc in calls] == [(0, "get_weather")]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not any("<tool_call>" in (c.choices[0].delta.content or "") for c in chunks)
    words = list(
        client.chat.completions.create(
            model="tiny", stream=True, temperature=0, messages=[*ASK[:0], *_answer_history()]
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in words)
    assert text == ANSWER and words[-1].choices[0].finish_reason == "stop"


def _answer_history():
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {**CALL, "arguments": '{"city": "Paris"}'}}
        ],
    }
    return [*ASK, call, {"role": "tool", "tool_call_id": "c1", "content": '{"c": 5}'}]


def test_n_stop_and_sampling(server):
    client = _client(server)
    many = client.chat.completions.create(model="tiny", messages=_answer_history(), n=3,
                                          temperature=0)  # fmt: skip
    assert [c.index for c in many.choices] == [0, 1, 2]
    assert {c.message.content for c in many.choices} == {ANSWER}
    cut = client.chat.completions.create(model="tiny", messages=_answer_history(),
                                         temperature=0, stop=[" C "])  # fmt: skip
    assert cut.choices[0].message.content == "It is 5" and cut.choices[0].finish_reason == "stop"
    short = client.chat.completions.create(model="tiny", messages=_answer_history(),
                                           temperature=0, max_tokens=2)  # fmt: skip
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 2
    hot = client.chat.completions.create(model="tiny", messages=_answer_history(),
                                         temperature=1.5, seed=3, max_tokens=8)  # fmt: skip
    assert hot.usage.completion_tokens <= 8


def test_concurrent_requests_decode_together(server):
    client = _client(server)
    batcher = server["app"].state.batcher
    before = batcher.stats["max_live"]

    def ask(i):
        r = client.chat.completions.create(model="tiny", messages=_answer_history(),
                                           temperature=0)  # fmt: skip
        return r.choices[0].message.content

    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(ask, range(32)))
    assert replies == [ANSWER] * 32
    assert batcher.stats["max_live"] >= 4 and batcher.stats["max_live"] >= before


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "other", "messages": ASK}, 404, "model"),
        ({"model": "tiny", "messages": []}, 400, "messages"),
        ({"model": "tiny", "messages": [{"role": "robot", "content": "hi"}]}, 400,
         "messages[0].role"),
        ({"model": "tiny", "messages": ASK, "max_tokens": 5000}, 400, "max_tokens"),
        ({"model": "tiny", "messages": ASK, "temperature": 9}, 400, "temperature"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "x " * 3000}]}, 400,
         "messages"),
        ({"model": "tiny", "messages": ASK, "tool_choice": "required"}, 400, "tool_choice"),
        ({"model": "tiny", "messages": [{"role": "assistant", "content": "", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
         400, "messages[0].tool_calls[0].function.arguments"),
    ],
)  # fmt: skip
def test_bad_requests_get_a_4xx_naming_the_field(server, body, status, param):
    r = httpx.post(server["url"] + "/v1/chat/completions", json=body,
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=60)  # fmt: skip
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_malformed_json_and_api_key(server):
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    r = httpx.post(server["url"] + "/v1/chat/completions", content=b"{not json", headers=auth)
    assert r.status_code == 400 and "error" in r.json()
    with pytest.raises(openai.AuthenticationError):
        _client(server, key="wrong").models.list()
    assert httpx.get(server["url"] + "/health").json()["status"] == "ok"  # no key needed


def test_the_real_engine_serves_greedy_turns_batched(real_server):
    """Through the real decoder: a greedy reply equals Engine.generate on the same prompt,
    streaming gives the same text, and concurrent requests share decode steps."""
    from agentrl.chat.render import encode_prompt
    from agentrl.serve.app import streamable_content as streamable
    from agentrl.serve.protocol import choice_message

    client = openai.OpenAI(base_url=real_server["url"] + "/v1", api_key="x", max_retries=0)
    engine = real_server["engine"]
    tok = engine.tokenizer
    (want,) = engine.generate([encode_prompt(tok, ASK)], max_new_tokens=24, greedy=True)
    want_text = tok.decode(want.ids[:-1] if want.stopped else want.ids,
                           skip_special_tokens=False)  # fmt: skip
    reply = client.chat.completions.create(model="tiny", messages=ASK, temperature=0,
                                           max_tokens=24)  # fmt: skip
    assert reply.usage.completion_tokens == len(want.ids)
    expected, has_calls = choice_message(want_text)
    assert reply.choices[0].message.content == expected["content"]
    assert bool(reply.choices[0].message.tool_calls) == has_calls
    streamed = client.chat.completions.create(model="tiny", messages=ASK, temperature=0,
                                              max_tokens=24, stream=True)  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == streamable(want_text)
    batcher = real_server["app"].state.batcher
    steps_before, jobs_before = batcher.stats["steps"], batcher.stats["jobs"]
    with ThreadPoolExecutor(8) as pool:
        outs = list(
            pool.map(
                lambda _: client.chat.completions.create(
                    model="tiny", messages=ASK, temperature=0, max_tokens=24
                ),
                range(8),
            )
        )
    assert {o.usage.completion_tokens for o in outs} == {len(want.ids)}
    steps = batcher.stats["steps"] - steps_before
    assert batcher.stats["jobs"] - jobs_before == 8
    assert steps < 8 * len(want.ids)  # shared decode steps, not one request at a time


PICK = [{"type": "function", "function": {
    "name": "pick_city", "description": "Choose a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]  # fmt: skip


def test_tool_choice_required_and_named_are_enforced_by_the_grammar(real_server):
    """The tiny model never writes a call by itself; with tool_choice required, or naming a
    function, the grammar makes every reply well-formed calls of the offered (named) tools."""
    client = openai.OpenAI(base_url=real_server["url"] + "/v1", api_key="x", max_retries=0)
    ask = [{"role": "user", "content": "Pick a city."}]
    free = client.chat.completions.create(model="tiny", messages=ask, tools=PICK, temperature=0,
                                          max_tokens=40)  # fmt: skip
    assert not free.choices[0].message.tool_calls
    named = {"type": "function", "function": {"name": "pick_city"}}
    for choice in ("required", named):
        reply = client.chat.completions.create(model="tiny", messages=ask, tools=PICK, n=2,
                                               tool_choice=choice, temperature=1.0, seed=3,
                                               max_tokens=60)  # fmt: skip
        for c in reply.choices:
            calls = c.message.tool_calls
            assert calls, c
            for call in calls:
                assert call.function.name in {"pick_city", "get_weather"}
                args = json.loads(call.function.arguments)
                assert call.function.name != "pick_city" or args["city"] in (
                    "Paris",
                    "Rome",
                    "Oslo",
                )
            if choice is named:
                assert {call.function.name for call in calls} == {"pick_city"}
    r = httpx.post(real_server["url"] + "/v1/chat/completions", timeout=60, json={
        "model": "tiny", "messages": ask, "tools": PICK,
        "tool_choice": {"type": "function", "function": {"name": "nope"}}})  # fmt: skip
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
