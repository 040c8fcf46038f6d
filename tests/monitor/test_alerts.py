"""Alert rules: each kind's condition on a metric history, firing once per episode of the
condition, alerts.jsonl, the webhook (a real HTTP server on loopback) and config errors."""

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from agentrl.config import AlertRule, ConfigError, build_config
from agentrl.monitor.alerts import AlertMonitor, check_rule, metric_value
from agentrl.monitor.metrics import read_jsonl


def _hist(key, values, **more):
    return [{key: v, **{k: vs[i] for k, vs in more.items()}} for i, v in enumerate(values)]


def test_above_and_below_use_the_window_mean():
    rule = AlertRule(name="kl", metric="loss/kl", threshold=0.5, window=3)
    assert check_rule(rule, _hist("loss/kl", [0.1, 0.2, 2.0])) is not None  # mean 0.77
    assert check_rule(rule, _hist("loss/kl", [0.1, 0.2, 1.0])) is None  # mean 0.43
    assert check_rule(rule, _hist("loss/kl", [0.1, 2.0])) is None  # window not full yet
    low = AlertRule(name="succ", metric="rollout/success_rate", kind="below", threshold=0.1)
    metric, value, message = check_rule(low, _hist("rollout/success_rate", [0.5, 0.05]))
    assert (metric, value) == ("rollout/success_rate", 0.05) and "below 0.1" in message


def test_nonfinite_reads_nan_strings_of_metrics_jsonl():
    rule = AlertRule(name="nan", metric="reward/total", kind="nonfinite")
    assert math.isnan(check_rule(rule, _hist("reward/total", [1.0, "nan"]))[1])
    assert check_rule(rule, _hist("reward/total", [float("inf")])) is not None
    assert check_rule(rule, _hist("reward/total", ["nan", 0.3])) is None  # only the latest
    above = AlertRule(name="kl", metric="reward/total", threshold=0.5)
    assert check_rule(above, _hist("reward/total", ["nan"])) is None  # nonfinite's job


def test_drop_compares_the_halves_of_the_window():
    rule = AlertRule(name="ent", metric="policy/entropy", kind="drop", threshold=0.5, window=4)
    _, value, message = check_rule(rule, _hist("policy/entropy", [1.0, 1.0, 0.3, 0.3]))
    assert value == 0.3 and "fell 70%" in message
    assert check_rule(rule, _hist("policy/entropy", [1.0, 1.0, 0.6, 0.6])) is None  # 40%
    assert check_rule(rule, _hist("policy/entropy", [0.3, 0.3, 1.0, 1.0])) is None  # a rise


def test_rise_while_flat_is_the_format_hacking_signature():
    rule = AlertRule(name="fmt", metric="reward/format", kind="rise_while_flat",
                     other="reward/completion", threshold=0.2, window=4)  # fmt: skip
    hacked = _hist("reward/format", [0.2, 0.3, 0.8, 0.9], **{"reward/completion": [0.1] * 4})
    assert "while reward/completion stayed" in check_rule(rule, hacked)[2]
    learning = _hist("reward/format", [0.2, 0.3, 0.8, 0.9],
                     **{"reward/completion": [0.1, 0.1, 0.4, 0.5]})  # fmt: skip
    assert check_rule(rule, learning) is None


def test_a_glob_takes_the_largest_matching_metric():
    record = {"tool/a/timeout_rate": 0.1, "tool/b/timeout_rate": 0.4, "tool/b/other": 9.0}
    assert metric_value(record, "tool/*/timeout_rate") == ("tool/b/timeout_rate", 0.4)
    assert metric_value(record, "tool/*/missing") is None
    rule = AlertRule(name="t", metric="tool/*/timeout_rate", threshold=0.2)
    assert check_rule(rule, [record])[0] == "tool/b/timeout_rate"


def test_an_alert_fires_once_and_rearms(tmp_path):
    seen = []
    rule = AlertRule(name="kl", metric="loss/kl", threshold=0.5, action="stop")
    mon = AlertMonitor([rule], tmp_path, report=seen.append)
    fired = [len(mon.observe(i, {"loss/kl": v})) for i, v in enumerate([0.1, 0.9, 0.9, 0.1, 0.8])]
    assert fired == [0, 1, 0, 0, 1]
    lines = read_jsonl(tmp_path / "alerts.jsonl")
    assert [(a["rule"], a["step"], a["action"]) for a in lines] == [("kl", 1, "stop"),
                                                                    ("kl", 4, "stop")]  # fmt: skip
    assert mon.stop.step == 1 and len(seen) == 2 and "stopping the run" in seen[0]


def test_seeded_history_spans_a_resume(tmp_path):
    rule = AlertRule(name="ent", metric="policy/entropy", kind="drop", threshold=0.5, window=4)
    mon = AlertMonitor([rule], tmp_path, report=lambda _: None)
    mon.seed(_hist("policy/entropy", [1.0, 1.0, 0.3]))
    assert [a.rule for a in mon.observe(3, {"policy/entropy": 0.3})] == ["ent"]


class _Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Hook.received = []
    yield f"http://127.0.0.1:{server.server_port}/hook", _Hook.received
    server.shutdown()


def test_the_webhook_gets_the_alert_as_json(tmp_path, webhook):
    url, received = webhook
    rule = AlertRule(name="kl", metric="loss/kl", threshold=0.5)
    mon = AlertMonitor([rule], tmp_path, webhook=url, report=lambda _: None)
    mon.observe(7, {"loss/kl": 3.0})
    assert received[0]["rule"] == "kl" and received[0]["step"] == 7 and received[0]["value"] == 3
    assert read_jsonl(tmp_path / "alerts.jsonl")[0]["webhook"] == "ok"


def test_a_dead_webhook_is_reported_not_raised(tmp_path):
    seen = []
    rule = AlertRule(name="kl", metric="loss/kl", threshold=0.5)
    mon = AlertMonitor([rule], tmp_path, webhook="http://127.0.0.1:9/none",
                       webhook_timeout_s=0.5, report=seen.append)  # fmt: skip
    assert len(mon.observe(0, {"loss/kl": 3.0})) == 1
    assert "URLError" in read_jsonl(tmp_path / "alerts.jsonl")[0]["webhook"]
    assert any("alert webhook" in s for s in seen)


def test_bad_alert_configs_name_the_field():
    with pytest.raises(ConfigError, match="needs 'other'"):
        build_config(overrides=['monitor.alerts=[{name: x, metric: m, kind: rise_while_flat, '
                                'window: 4}]'])  # fmt: skip
    with pytest.raises(ConfigError, match="window >= 2"):
        build_config(overrides=["monitor.alerts=[{name: x, metric: m, kind: drop}]"])
    with pytest.raises(ConfigError, match="repeated"):
        build_config(overrides=["monitor.alerts=[{name: x, metric: m}, {name: x, metric: n}]"])
    with pytest.raises(ConfigError, match="monitor.alerts.0.action"):
        build_config(overrides=["monitor.alerts=[{name: x, metric: m, action: halt}]"])
    with pytest.raises(ConfigError, match="http"):
        build_config(overrides=["monitor.webhook=ftp://x"])
    assert [r.name for r in build_config().monitor.alerts][:2] == ["kl_explosion",
                                                                   "reward_nonfinite"]  # fmt: skip
