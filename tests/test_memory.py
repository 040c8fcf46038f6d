"""Hierarchical memory (agentrl.memory): config, warm records, the note's budget, cold
recall by MinHash LSH, the prompt view, and the episode advantage over segments."""

import json

import pytest
import torch

from agentrl.algos.grpo import compute_advantages
from agentrl.algos.segments import broadcast_to_rows, segment_batch, segment_rows
from agentrl.config import ConfigError, build_config
from agentrl.config.memory import MemoryConfig
from agentrl.memory import ColdStore, EpisodeMemory, compress_turn, render_note
from agentrl.memory.turns import split_turns
from agentrl.types import RewardBreakdown, Segment, Trajectory

CITIES = ["Oslo", "Lima", "Paris", "Rome", "Cairo", "Tokyo", "Seoul", "Dubai", "Lagos", "Quito",
          "Perth", "Doha", "Riga", "Bern", "Kyiv", "Baku"]  # fmt: skip


def words(text: str) -> int:
    return len(text.split())


def weather_turn(city: str, temp: int, cond: str = "sunny") -> list[dict]:
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}
    result = json.dumps({"city": city, "temperature_c": temp, "condition": cond})
    return [{"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "get_weather", "content": result}]  # fmt: skip


def dialogue(n: int) -> list[dict]:
    head = [{"role": "system", "content": "You are a weather assistant."},
            {"role": "user", "content": "Which city is warmest?"}]  # fmt: skip
    return head + [m for i in range(n) for m in weather_turn(CITIES[i], 10 + i)]


def test_config_defaults_and_errors_name_the_field():
    cfg = build_config({})
    assert cfg.rollout.memory.enabled is False and cfg.rollout.memory.hot_turns == 3
    assert cfg.rollout.memory.warm_turns == 7
    on = build_config({}, ["rollout.memory.enabled=true", "rollout.memory.budget_tokens=200"])
    assert on.rollout.memory.budget_tokens == 200
    bad = {"hot_turns": 0, "budget_tokens": 4, "cold_top_k": -1, "warm_turns": "x"}
    for field, value in bad.items():
        with pytest.raises(ConfigError, match=f"rollout.memory.{field}"):
            build_config({}, [f"rollout.memory.{field}={value}"])
    with pytest.raises(ConfigError, match="unknown config field 'rollout.memory.hot'"):
        build_config({}, ["rollout.memory.hot=2"])
    with pytest.raises(ConfigError, match="search_k"):
        build_config({}, ["rollout.memory.enabled=true", "rollout.search_k=4"])


def test_warm_record_carries_key_values_and_state():
    rec = compress_turn(4, weather_turn("Oslo", -3, "snowy"))
    assert rec.kind == "get_weather" and rec.turn == 4
    call = rec.calls[0]
    assert call.arguments == (("city", "Oslo"),)
    assert dict(call.result) == {"temperature_c": "-3", "condition": "snowy"}  # city: an arg
    assert call.state == "ok"
    assert rec.line() == "t4 get_weather(city=Oslo) ok: temperature_c=-3 condition=snowy"
    fault = weather_turn("Lima", 0)
    fault[1]["content"] = json.dumps({"error": "unavailable", "message": "busy, try again"})
    assert compress_turn(1, fault).line() == "t1 get_weather(city=Lima) error unavailable"
    nested = weather_turn("Rome", 1)
    nested[1]["content"] = json.dumps({"order": {"id": 17, "items": [{"sku": "A-9"}]}})
    values = dict(compress_turn(2, nested).calls[0].result)
    assert values == {"order.id": "17", "order.items.0.sku": "A-9"}
    wire = weather_turn("Oslo", 2)  # arguments as JSON text, as OpenAI clients send them
    wire[0]["tool_calls"][0]["function"]["arguments"] = '{"city": "Oslo"}'
    assert compress_turn(0, wire).calls[0].arguments == (("city", "Oslo"),)
    bad = [{"role": "assistant", "content": "<tool_call>{"},
           {"role": "tool", "content": json.dumps({"error": "parse_error", "code": "unclosed_tag",
                                                   "message": "..."})}]  # fmt: skip
    assert compress_turn(3, bad).line() == "t3 parse_error: unclosed_tag"
    answer = [{"role": "assistant", "content": "Oslo is coldest at -3°C."}]
    assert compress_turn(5, answer).line() == "t5 answer: Oslo is coldest at -3°C."


def test_note_fits_the_budget_and_keeps_priorities():
    warm = [compress_turn(i, weather_turn(CITIES[i], 10 + i)) for i in range(3, 10)]
    cold = [compress_turn(1, weather_turn("Lima", 11))]
    full = render_note(warm, cold, words, 10_000)
    assert full.splitlines()[:3] == ["[memory]", "recalled:", cold[0].line()]
    assert full.splitlines()[3:] == ["recent:", *(r.line() for r in warm)]
    per_line = words(warm[0].line())  # every line has the same word count here
    assert per_line == 5
    for budget in (1, 8, 12, 17, 22, 27, 40):
        note = render_note(warm, cold, words, budget)
        assert words(note) <= budget
    # 1 (header) + 1 + 2 lines (recent: t9, t8) + 1 + 1 line (recalled) = 1+1+10+1+5 = 18
    note = render_note(warm, cold, words, 18)
    assert note.splitlines() == ["[memory]", "recalled:", cold[0].line(), "recent:",
                                 warm[-2].line(), warm[-1].line()]  # fmt: skip
    assert render_note(warm, cold, words, 5) == ""  # not even one line fits


def test_cold_store_recalls_the_relevant_old_turn():
    store = ColdStore(num_perm=64)
    for i, city in enumerate(CITIES[:12]):
        turn = weather_turn(city, 20 + i, ("sunny", "rainy", "foggy")[i % 3])
        store.add(compress_turn(i, turn), json.dumps(turn[1]["content"]))
    assert len(store) == 12
    state = 'get_weather {"city": "Tokyo"} -> ?'
    best, score = store.recall(state, k=2)[0]
    assert best.turn == CITIES.index("Tokyo") and 0 < score <= 1
    assert "temperature_c=25" in best.line()  # Tokyo was looked up at turn 5: 20 + 5
    assert store.recall("nothing shared here", k=2) == []
    assert store.recall(state, k=0) == []


def test_view_hot_verbatim_warm_records_and_recall():
    cfg = MemoryConfig(enabled=True, hot_turns=3, warm_turns=7, budget_tokens=400, cold_top_k=1)
    mem = EpisodeMemory(cfg, words)
    assert [mem.needs_rewrite(t) for t in range(5)] == [False, False, False, False, True]
    messages = dialogue(14) + weather_turn("Paris", 99)  # turn 14 asks about Paris again
    head, turns = split_turns(messages)
    assert len(head) == 2 and len(turns) == 15
    view = mem.view(messages)
    assert mem.first_verbatim == 12
    assert view[:2] == head and view[3:] == messages[-6:]  # hot: turns 12-14, verbatim
    note = view[2]["content"]
    assert view[2]["role"] == "user" and note == mem.last_note
    for i in range(5, 12):  # warm: turns 5-11 with their key values
        assert f"t{i} get_weather(city={CITIES[i]}) ok: temperature_c={10 + i}" in note
    assert mem.last_recalled == [2]  # Paris, from the cold turns 0-4
    assert note.split("recalled:\n")[1].startswith("t2 get_weather(city=Paris)")
    assert len(mem.cold) == 5
    assert not mem.needs_rewrite(15) and mem.needs_rewrite(16)


def test_rewrite_every_keeps_deltas_between_rewrites():
    mem = EpisodeMemory(MemoryConfig(enabled=True, hot_turns=3, rewrite_every=2), words)
    assert [mem.needs_rewrite(t) for t in range(6)] == [False] * 5 + [True]
    mem.view(dialogue(5))
    assert mem.first_verbatim == 2
    assert [mem.needs_rewrite(t) for t in (6, 7)] == [False, True]


def _traj(group: int, reward: float, n_segments: int, termination: str = "failure") -> Trajectory:
    segs = [Segment([100 * n_segments + k, 7, 8], [0, 1, 1], [0.0, -0.1, -0.2], [-1, k, k])
            for k in range(n_segments)]  # fmt: skip
    last = segs[-1] if segs else Segment([1, 2], [0, 1], [0.0, -0.3], [-1, 0])
    return Trajectory("t", group, [], last.token_ids, last.loss_mask, last.logprobs,
                      last.turn_of_token, RewardBreakdown({"r": reward}, {"r": 1.0}), termination,
                      segments=segs if n_segments > 1 else [])  # fmt: skip


def test_segments_share_the_episode_advantage_and_baselines_count_episodes():
    trajs = [_traj(0, 1.0, 3), _traj(0, 0.0, 1), _traj(1, 1.0, 2), _traj(1, 0.5, 1),
             _traj(1, 0.0, 4, termination="harness_error")]  # fmt: skip
    adv, valid = compute_advantages(trajs, "zero", scale=True)  # (N,)
    # group 0: rewards 1, 0 -> +1, -1 (a per-segment baseline would be 0.75 and give 0.25)
    # group 1: 1, 0.5 (the harness fault is out): mean 0.75, std 0.25 -> +1, -1
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 1.0, -1.0, 0.0]), atol=1e-4)
    rows, owner = segment_rows(trajs)
    assert owner.tolist() == [0, 0, 0, 1, 2, 2, 3, 4, 4, 4, 4]
    assert [r.token_ids[0] for r in rows[:3]] == [300, 301, 302]
    assert rows[1].info == {"segment": 1, "segment_of": 0}
    row_adv = broadcast_to_rows(adv, owner)  # (R,)
    expected = [1.0, 1.0, 1.0, -1.0, 1.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0]
    assert torch.allclose(row_adv, torch.tensor(expected), atol=1e-4)
    batch, b_owner = segment_batch(trajs, valid, pad_id=0)
    assert batch.input_ids.shape == (11, 3) and torch.equal(b_owner, owner)
    assert batch.input_ids[0].tolist() == [300, 7, 8] and batch.mask[0].tolist() == [1.0, 1.0]
    assert batch.old_logp[2].tolist() == pytest.approx([-0.1, -0.2])
    assert batch.mask[7:].sum() == 0  # every segment of the harness fault is masked
    assert trajs[0].num_policy_tokens == 6 and trajs[1].num_policy_tokens == 2  # all segments
