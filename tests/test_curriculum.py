"""Curriculum: promotion, demotion to decomposed sub-tasks, stages, review, resume."""

from __future__ import annotations

import json

import pytest

from agentrl.config import build_config
from agentrl.curriculum import Assignment, Curriculum

LEVELS = {"weather": [1, 2, 3], "meeting": [0, 1, 2, 3], "shop": [0, 1, 2, 3]}


def feed(cur: Curriculum, outcomes: list[bool]) -> list[str]:
    """Play ``outcomes`` one task at a time through next_levels/update."""
    events = []
    for ok in outcomes:
        (a,) = cur.next_levels(1)
        events += cur.update([a], [ok])
    return events


def test_promotion_then_stage_then_demotion_to_subtasks():
    cur = Curriculum([["weather"], ["meeting"]], LEVELS, window=4, review_fraction=0.0)
    assert cur.next_levels(1) == [Assignment("weather", 1, 0)]
    # 3 of 4 = 75%: not above 80%, nothing moves
    assert feed(cur, [True, True, False, True]) == [] and cur.level["weather"] == 1
    assert feed(cur, [True] * 4) == ["weather: level 1 -> 2"]
    assert feed(cur, [True] * 4) == ["weather: level 2 -> 3"]
    assert feed(cur, [True] * 4) == ["stage 1 -> 2"]
    assert cur.next_levels(2) == [Assignment("meeting", 1, 1)] * 2  # starts at level 1, not 0
    assert feed(cur, [False, True, False, False]) == []  # 25%: not below 20%
    assert feed(cur, [False] * 4) == ["meeting: level 1 -> 0"]  # decomposed sub-tasks
    assert cur.next_levels(1)[0].level == 0
    assert feed(cur, [False] * 8) == [] and cur.level["meeting"] == 0  # nothing lower
    m = cur.metrics()
    assert m["curriculum/stage"] == 2.0 and m["curriculum/meeting/level"] == 0.0
    assert m["curriculum/promotions"] == 2.0 and m["curriculum/demotions"] == 1.0


def test_stage_opens_only_when_every_family_is_mastered():
    cur = Curriculum([["meeting", "shop"], ["weather"]], LEVELS, window=2, review_fraction=0)
    cur.level.update(meeting=3, shop=2)
    cur.update([Assignment("meeting", 3, 0)] * 2, [True, True])
    assert cur.stage == 0 and "meeting" in cur.mastered
    events = cur.update([Assignment("shop", 2, 0)] * 2, [True, True])
    assert events == ["shop: level 2 -> 3"] and cur.stage == 0
    events = cur.update([Assignment("shop", 3, 0)] * 2, [True, True])
    assert events == ["stage 1 -> 2"] and cur.stage == 1


def test_stale_and_review_results_do_not_move_levels():
    cur = Curriculum([["weather"], ["shop"]], LEVELS, window=2, review_fraction=0.5, seed=3)
    cur.stage = 1
    picks = cur.next_levels(200)
    review = [a for a in picks if a.review]
    assert 60 < len(review) < 140 and all(a.env_id == "weather" for a in review)
    assert cur.update(review[:4], [False] * 4) == [] and cur.level["weather"] == 1
    assert cur.update([Assignment("shop", 3, 1)] * 4, [True] * 4) == []  # not the current level


def test_level_review_draws_passed_levels_and_never_moves_levels():
    cur = Curriculum.single("meeting", [0, 1, 2, 3], window=2, level_review=0.25, seed=1)
    assert cur.passed_levels("meeting") == []
    assert cur.next_levels(50) == [Assignment("meeting", 1, 0)] * 50
    cur.level["meeting"] = 3
    assert cur.passed_levels("meeting") == [1, 2]  # level 0 (sub-tasks) is below the start
    picks = cur.next_levels(400)
    review = [a for a in picks if a.review]
    assert 70 < len(review) < 130 and {a.level for a in review} == {1, 2}
    assert all(a.level == 3 for a in picks if not a.review)
    assert cur.update(review[:4], [False] * 4) == [] and cur.level["meeting"] == 3
    assert cur.update([Assignment("meeting", 3, 0)] * 2, [False] * 2) == ["meeting: level 3 -> 2"]
    with pytest.raises(ValueError, match="level_review must be in"):
        Curriculum.single("meeting", [0, 1], level_review=1.5)
    from agentrl.train.sampler import make_curriculum

    for staged in ("false", "true"):  # the config reaches both kinds of curriculum
        cfg = build_config({}, ["curriculum.enabled=true", f"curriculum.staged={staged}",
                                "curriculum.level_review=0.3"])  # fmt: skip
        assert make_curriculum(cfg).level_review == 0.3


def test_state_dict_roundtrip_resumes_exactly():
    a = Curriculum([["weather"], ["meeting", "shop"]], LEVELS, window=3, seed=1)
    feed(a, [True] * 10 + [False] * 5)
    state = json.loads(json.dumps(a.state_dict()))
    b = Curriculum([["weather"], ["meeting", "shop"]], LEVELS, window=3, seed=99)
    b.load_state_dict(state)
    assert b.next_levels(20) == a.next_levels(20)
    assert b.metrics() == a.metrics()


def test_from_config_and_bad_settings():
    cfg = build_config({}, ["curriculum.window=5", "curriculum.promote_above=0.7"]).curriculum
    cur = Curriculum.from_config(cfg, levels={e: [1, 2] for s in cfg.stages for e in s})
    assert cur.window == 5 and cur.stages[0] == ["weather"] and len(cur.stages) == 4
    with pytest.raises(ValueError, match="demote_below < promote_above"):
        Curriculum([["weather"]], LEVELS, promote_above=0.2, demote_below=0.5)
    with pytest.raises(ValueError, match="non-empty"):
        Curriculum([[]], LEVELS)
    single = Curriculum.single("shop", [0, 1, 2, 3], window=2)
    assert single.next_levels(1)[0] == Assignment("shop", 1, 0)


def test_default_levels_come_from_the_registered_families():
    cur = Curriculum([["weather", "meeting"]])
    assert cur.levels == {"weather": [1, 2, 3], "meeting": [0, 1, 2, 3]}
