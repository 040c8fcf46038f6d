"""monitor.report_to: a real (tiny) run writes TensorBoard events, a W&B offline run and an
MLflow SQLite store, and each is read back with its own library (W&B's transaction log with its
own protobuf records) and matched against metrics.jsonl."""

import struct

import pytest
from runhelpers import tiny_run_overrides

from agentrl.config import build_config
from agentrl.monitor.metrics import read_jsonl
from agentrl.monitor.sinks import numeric
from agentrl.train import train


def _run(tiny_dir, run):
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, run), "train.steps=2",
                            "train.eval_episodes=2", "train.eval_levels=[1]",
                            "train.general_check=false",
                            "monitor.report_to=[jsonl, tensorboard, wandb, mlflow]",
                            "monitor.run_name=sinks-test"])  # fmt: skip
    train(cfg, progress=False)
    return read_jsonl(run / "metrics.jsonl"), read_jsonl(run / "eval.jsonl")


@pytest.fixture(scope="module")
def sink_run(tiny_dir, tmp_path_factory):
    for package in ("tensorboard", "wandb", "mlflow"):  # CI installs agentrl[monitor]
        pytest.importorskip(package)
    run = tmp_path_factory.mktemp("sinks") / "run"
    metrics, evals = _run(tiny_dir, run)
    assert len(metrics) == 2 and [p["step"] for p in evals] == [0, 2]
    return run, metrics, evals


def test_numeric_keeps_finite_numbers_only():
    assert numeric({"step": 3, "a": 1, "b": float("nan"), "c": "x", "d": True, "e": 0.5}) == {
        "a": 1.0, "e": 0.5}  # fmt: skip


def test_tensorboard_events_hold_every_step_and_evaluation(sink_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, metrics, evals = sink_run
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    reward = acc.Scalars("reward/total")
    assert [e.step for e in reward] == [1, 2]
    assert [e.value for e in reward] == pytest.approx([m["reward/total"] for m in metrics])
    success = acc.Scalars("eval/success_rate")
    assert [(e.step, e.value) for e in success] == [(p["step"], p["success_rate"]) for p in evals]
    assert "eval/success/level_1" in acc.Tags()["scalars"]


def test_mlflow_store_holds_metrics_params_and_status(sink_run):
    from mlflow.tracking import MlflowClient

    from agentrl.monitor.sinks import mlflow_store_uri

    run, metrics, evals = sink_run
    client = MlflowClient(tracking_uri=mlflow_store_uri(run))
    exp = client.get_experiment_by_name("agentrl")
    (found,) = client.search_runs([exp.experiment_id])
    assert found.info.run_name == "sinks-test" and found.info.status == "FINISHED"
    history = client.get_metric_history(found.info.run_id, "rollout/success_rate")
    assert [(h.step, h.value) for h in history] == [
        (i + 1, pytest.approx(m["rollout/success_rate"])) for i, m in enumerate(metrics)
    ]
    assert found.data.params["algo.name"] == "grpo" and found.data.params["train.steps"] == "2"
    evals_logged = client.get_metric_history(found.info.run_id, "eval/success_rate")
    assert sorted(h.step for h in evals_logged) == [0, 2]


def _wandb_records(path):
    """The protobuf records of a W&B transaction log (a ':W&B' header, then 32 KiB blocks of
    LevelDB-log records: crc32, length, type FULL=1 / FIRST=2 / MIDDLE=3 / LAST=4)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, parts, out = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7]) if left >= 7 else (0, 0, 0)
        if kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(parts)
            out.append(record)
    return out


def test_wandb_offline_run_holds_the_history(sink_run):
    import json

    run, metrics, _ = sink_run
    (log,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    records = _wandb_records(log)
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]  # fmt: skip
    steps = [h for h in history if "reward/total" in h]
    assert [h["_step"] for h in steps] == [1, 2]
    assert [h["reward/total"] for h in steps] == pytest.approx([m["reward/total"] for m in metrics])
    assert any("eval/success_rate" in h for h in history)
    assert any(r.WhichOneof("record_type") == "exit" and r.exit.exit_code == 0 for r in records)


def test_a_missing_sink_package_names_the_extra(tiny_dir, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, tmp_path / "r"), "train.steps=1",
                            "monitor.report_to=[tensorboard]"])  # fmt: skip
    with pytest.raises(ImportError, match=r"agentrl\[monitor\]"):
        train(cfg, progress=False)
    assert not (tmp_path / "r" / "checkpoints").exists()  # refused before any model work


def test_an_evaluation_before_recording_is_held_once_and_not_kept_without_sinks(tiny_dir, tmp_path):
    """jsonl only (no optional sink): the before-RL evaluation point must not be re-queued
    while the held points are flushed (that looped until memory ran out)."""
    import io

    from rich.console import Console

    from agentrl.train.run import Run

    run = Run(build_config({}, tiny_run_overrides(tiny_dir, tmp_path / "run")),
              Console(file=io.StringIO()))  # fmt: skip
    run._to_sinks(0, {"eval/success_rate": 0.5})
    assert run._pending == [(0, {"eval/success_rate": 0.5})]
    with run.recording(None, None, None):
        assert run.sinks == [] and run._pending == []
        run._to_sinks(1, {"eval/success_rate": 0.6})  # while recording: straight to the sinks
        assert run._pending == []
