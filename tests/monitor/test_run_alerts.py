"""Alerts in a real (tiny) run: a stop rule checkpoints and ends the run, the webhook (a
loopback HTTP server) receives it, and ``--resume`` continues with the rule changed."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from runhelpers import tiny_run_overrides

from agentrl.config import build_config
from agentrl.monitor.metrics import read_jsonl
from agentrl.train import train


def _serve(received):
    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_stop_rule_checkpoints_posts_and_resume_goes_on(tiny_dir, tmp_path):
    received: list = []
    server = _serve(received)
    run = tmp_path / "run"
    # rollout/episodes is 2 on every step: the rule holds once its 2-step window is full
    rule = "{name: too_many, metric: rollout/episodes, threshold: 1, window: 2, action: stop}"
    url = f"http://127.0.0.1:{server.server_port}/alerts"
    overrides = [*tiny_run_overrides(tiny_dir, run), "train.steps=4",
                 "train.checkpoint_every=0", f"monitor.alerts=[{rule}]",
                 f"monitor.webhook={url}"]  # fmt: skip
    try:
        summary = train(build_config({}, overrides), progress=False)
    finally:
        server.shutdown()
    assert summary["interrupted"] and summary["stopped_by"] == "alert:too_many"
    assert (run / "checkpoints" / "step_000002" / "COMPLETE").is_file()
    assert not (run / "model").exists()  # a stopped run saves no final model
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [0, 1]
    (alert,) = read_jsonl(run / "alerts.jsonl")
    assert (alert["rule"], alert["step"], alert["webhook"]) == ("too_many", 1, "ok")
    assert received[0]["rule"] == "too_many" and received[0]["value"] == 2.0
    resumed = build_config({}, [*overrides[:-2], "monitor.alerts=[]"])  # the fix for the rest
    summary = train(resumed, progress=False, resume=True)
    assert not summary["interrupted"] and summary["stopped_by"] is None
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2, 3]
    assert (run / "model").is_dir()


def test_a_warn_rule_reports_without_stopping(tiny_dir, tmp_path):
    run = tmp_path / "warn"
    rule = "{name: busy, metric: rollout/episodes, threshold: 1}"
    summary = train(build_config({}, [*tiny_run_overrides(tiny_dir, run), "train.steps=2",
                                      f"monitor.alerts=[{rule}]"]), progress=False)  # fmt: skip
    assert not summary["interrupted"]
    assert [(a["rule"], a["step"]) for a in read_jsonl(run / "alerts.jsonl")] == [("busy", 0)]
