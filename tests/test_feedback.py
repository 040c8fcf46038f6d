"""Live human feedback without a model: feedback files and the HTTP endpoint, the replayed
groups (the human layer alone, unrated group-mates at 0, a correction as one more member),
ratings of unknown or expired episodes dropped, bad input named, pending ratings checkpointed."""

from __future__ import annotations

import json

import pytest

from agentrl.config import build_config
from agentrl.train.feedback import FeedbackBook, parse_feedback, write_feedback
from agentrl.types import RewardBreakdown, Trajectory


def traj(group: int, answer: str, n_prompt: int = 3) -> Trajectory:
    ids = list(range(100, 100 + n_prompt)) + [7, 8, 9]
    mask = [0] * n_prompt + [1, 1, 1]
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}]
    reward = RewardBreakdown({"completion": 1.0}, {"completion": 1.0})
    return Trajectory("t", group, msgs, ids, mask, [0.0] * n_prompt + [-0.5] * 3,
                      [-1] * n_prompt + [0] * 3, reward, "failure")  # fmt: skip


def book(tmp_path, keep=8) -> FeedbackBook:
    cfg = build_config({}, ["train.feedback.enabled=true", "train.feedback.weight=2",
                            f"train.feedback.keep_steps={keep}"]).train.feedback  # fmt: skip
    return FeedbackBook(
        tmp_path, cfg, encode=lambda text: [50 + len(w) for w in text.split()] + [2]
    )


def test_a_rating_replays_its_group_with_the_human_layer_alone(tmp_path):
    b = book(tmp_path)
    b.remember(0, [traj(0, "a"), traj(0, "bb"), traj(1, "c"), traj(1, "d")])
    write_feedback(tmp_path, "0-1", rating=0.5)
    replays, m = b.replays(1)
    assert m["feedback/received"] == 1 and m["feedback/applied"] == 1
    assert [t.messages[-1]["content"] for t in replays] == ["a", "bb"]  # group 0 only
    assert [t.reward.layers for t in replays] == [{"human": 0.0}, {"human": 0.5}]
    assert [t.reward.total for t in replays] == [0.0, 1.0]  # weight 2
    assert replays[1].info["replay_of"] == "0-1" and replays[1].group_id == 0
    assert m["feedback/latency_s"] >= 0.0
    again, m2 = b.replays(2)  # each rating is used once
    assert again == [] and m2["feedback/applied"] == 0 and m2["feedback/received"] == 0


def test_a_correction_adds_the_corrected_episode_rated_one(tmp_path):
    b = book(tmp_path)
    b.remember(3, [traj(6, "wrong"), traj(6, "other")])
    write_feedback(tmp_path, "3-0", correction="It is 5 C")
    replays, m = b.replays(4)
    assert len(replays) == 3 and m["feedback/applied"] == 1
    fixed = replays[-1]
    assert fixed.token_ids == [100, 101, 102, 52, 52, 51, 51, 2]  # prompt kept, the turn replaced
    assert fixed.loss_mask == [0, 0, 0, 1, 1, 1, 1, 1]
    assert fixed.logprobs[3:] == [0.0] * 5  # the person is a deterministic behaviour policy
    assert fixed.turn_of_token[3:] == [0] * 5
    assert fixed.messages[-1] == {"role": "assistant", "content": "It is 5 C"}
    assert fixed.reward.layers == {"human": 1.0}
    assert [t.reward.layers["human"] for t in replays[:2]] == [0.0, 0.0]


def test_unknown_expired_and_bad_feedback(tmp_path):
    b = book(tmp_path, keep=2)
    b.remember(0, [traj(0, "a")])
    b.remember(1, [traj(1, "b")])
    b.remember(2, [traj(2, "c")])  # step 0 let go (keep_steps=2)
    write_feedback(tmp_path, "0-0", rating=1)
    write_feedback(tmp_path, "9-9", rating=-1)
    (tmp_path / "feedback" / "zz.json").write_text('{"episode_id": "1-0", "rating": 3}')
    (tmp_path / "feedback" / "zzz.json").write_text("not json")
    replays, m = b.replays(3)
    assert replays == [] and m["feedback/dropped"] == 2 and m["feedback/invalid"] == 2
    with pytest.raises(ValueError, match="'rating' must be in"):
        parse_feedback({"episode_id": "1-0", "rating": 1.5})
    with pytest.raises(ValueError, match="'episode_id'"):
        write_feedback(tmp_path, "episode seven", rating=1)
    with pytest.raises(ValueError, match="'rating' .* or 'correction'"):
        parse_feedback({"episode_id": "1-0"})


def test_pending_ratings_survive_a_checkpoint(tmp_path):
    b = book(tmp_path)
    b.remember(0, [traj(0, "a"), traj(0, "b")])
    write_feedback(tmp_path, "0-0", rating=-1.0)
    b.poll()  # read, not applied yet: a checkpoint now must keep it
    saved = b.state_dict()
    resumed = book(tmp_path)
    resumed.load_state_dict(saved)
    write_feedback(tmp_path, "0-1", rating=1.0)  # came after the checkpoint
    replays, m = resumed.replays(1)
    assert m["feedback/received"] == 1 and m["feedback/applied"] == 2
    assert [t.reward.layers["human"] for t in replays] == [-1.0, 1.0]


def test_the_http_endpoint_writes_feedback_files(tmp_path):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from agentrl.train.feedback_server import serve_feedback

    b = book(tmp_path)
    b.remember(0, [traj(0, "It is 5 C")])
    with serve_feedback(b, str(tmp_path), "127.0.0.1", 0) as url:
        listed = httpx.get(f"{url}/episodes").json()
        assert listed[0]["episode_id"] == "0-0" and listed[0]["final"] == "It is 5 C"
        ok = httpx.post(f"{url}/feedback", json={"episode_id": "0-0", "rating": 1})
        bad = httpx.post(f"{url}/feedback", json={"episode_id": "0-0", "rating": "great"})
    assert ok.status_code == 200 and ok.json()["accepted"]
    assert bad.status_code == 400 and "'rating'" in bad.json()["error"]
    replays, m = b.replays(1)
    assert m["feedback/applied"] == 1 and replays[0].reward.layers == {"human": 1.0}
    files = list((tmp_path / "feedback").glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["rating"] == 1


def test_a_taken_port_is_named_and_the_server_stops_after_the_block(tmp_path):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from agentrl.train.feedback_server import serve_feedback

    b = book(tmp_path)
    with serve_feedback(b, str(tmp_path), "127.0.0.1", 0) as url:
        port = int(url.rsplit(":", 1)[1])
        assert httpx.get(f"{url}/health").json() == {"status": "ok"}
        taken = pytest.raises(RuntimeError, match=rf"train.feedback.port: .*127.0.0.1:{port}")
        with taken, serve_feedback(b, str(tmp_path), "127.0.0.1", port):
            pass
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)
