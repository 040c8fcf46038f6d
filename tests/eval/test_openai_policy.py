"""The OpenAI-compatible client against a tiny local fake server."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentrl.envs.tasks.weather import CITIES
from agentrl.eval.api import evaluate_suites
from agentrl.eval.policies import OpenAIPolicy, from_openai_message, to_openai_messages

REQUESTS: list[dict] = []


class FakeChat(BaseHTTPRequestHandler):
    """Answers weather questions like a well-behaved model; refuses anything else."""

    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        REQUESTS.append(body)
        if self.path != "/v1/chat/completions":
            self.send_response(404)
            self.end_headers()
            return
        last = body["messages"][-1]
        names = {t["function"]["name"] for t in body.get("tools", [])}
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        city = next((c for c in CITIES if re.search(rf"\b{c}\b", user)), None)
        if last["role"] == "tool" and "error" not in json.loads(last["content"]):
            r = json.loads(last["content"])
            msg = {
                "role": "assistant",
                "content": f"It is {r['temperature_c']}°C and {r['condition']} in {r['city']}.",
            }
        elif city and "get_weather" in names and last["role"] in ("user", "tool"):
            args = json.dumps({"city": city})
            msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": args},
                    }
                ],
            }
        else:
            msg = {"role": "assistant", "content": "Sorry, I cannot help with that."}
        out = json.dumps({"choices": [{"index": 0, "message": msg}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)  # fmt: skip


@pytest.fixture()
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeChat)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    REQUESTS.clear()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_openai_endpoint_on_the_basic_suite(server):
    report, records = evaluate_suites(f"openai:{server}:fake-model", ["basic"], episodes=3)
    tasks = report["suites"]["basic"]["tasks"]
    assert tasks["weather"]["success_rate"] == 1.0  # the fake answers weather correctly
    assert tasks["shop"]["success_rate"] == 0.0  # and refuses the rest
    assert REQUESTS and all(
        r["temperature"] == 0.0 and r["model"] == "fake-model" for r in REQUESTS
    )
    followups = [r for r in REQUESTS if r["messages"][-1]["role"] == "tool"]
    assert followups
    for r in followups:
        call_ids = [c["id"] for m in r["messages"] for c in m.get("tool_calls", [])]
        assert r["messages"][-1]["tool_call_id"] in call_ids
        assert isinstance(r["messages"][-2]["tool_calls"][0]["function"]["arguments"], str)


def test_unreachable_endpoint_is_a_harness_error():
    report, records = evaluate_suites("openai:http://127.0.0.1:9/v1:none", ["basic"], episodes=1)
    assert {r["termination"] for r in records} == {"harness_error"}
    assert "cannot reach" in records[0]["error"]


def test_spec_parsing_and_message_conversion():
    p = OpenAIPolicy.from_spec("openai:http://h:8000/v1:Qwen2.5-0.5B")
    assert (p.base_url, p.model) == ("http://h:8000/v1", "Qwen2.5-0.5B")
    with pytest.raises(ValueError, match="openai:BASE_URL:MODEL"):
        OpenAIPolicy.from_spec("openai:localhost")
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "name": "f", "content": "{}"},
        {"role": "assistant", "content": "<tool_call>{bad"},
        {"role": "tool", "content": '{"error": "parse_error"}'},
    ]  # fmt: skip
    out = to_openai_messages(history)
    assert out[2]["tool_call_id"] == out[1]["tool_calls"][0]["id"]
    assert out[1]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'
    assert out[4]["role"] == "user"
    text = from_openai_message({"content": None, "tool_calls": [
        {"function": {"name": "f", "arguments": '{"x": 2}'}}]})  # fmt: skip
    assert text == '<tool_call>\n{"name": "f", "arguments": {"x": 2}}\n</tool_call>'


def test_the_docs_point_at_servers_that_exist():
    """agentrl ships no OpenAI-compatible server (no ``agentrl.serve``): the policy's docs
    name real ones instead of promising "our own server"."""
    import importlib.util

    import agentrl.eval.policies as policies

    docs = " ".join((policies.__doc__ or "").split())
    if importlib.util.find_spec("agentrl.serve") is None:
        assert not re.search(r"\bour own\s+server|\bagentrl's\s+server", docs)
        assert "agentrl itself ships no server" in docs
    assert "vllm serve" in docs and "/chat/completions" in docs
