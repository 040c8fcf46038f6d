"""The shop family: catalogue invariants, the checkout verifier, process rewards, re-asking."""

from __future__ import annotations

import random

import pytest
from envhelpers import call, play

import agentrl.envs as envs
from agentrl.envs import check_env
from agentrl.envs.tasks.shop import ShopFamily, matches

FAMILY = ShopFamily()


def setup(level: int, seed: int = 5):
    env = envs.make("shop")
    inst = FAMILY.sample(random.Random(seed), level)
    target = next(i for i in inst.data["catalogue"] if i["id"] == inst.data["target"])
    return env, inst, target, inst.data["want"]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_exactly_one_item_matches(level):
    for seed in range(30):
        inst = FAMILY.sample(random.Random(seed), level)
        hits = [i for i in inst.data["catalogue"] if matches(i, inst.data["want"])]
        assert [i["id"] for i in hits] == [inst.data["target"]]


def test_good_trajectory_buys_the_target():
    env, inst, target, want = setup(2)
    info = play(env, [
        call("search", query=f"{want['color']} {want['category']}"),
        call("filter_results", size=want["size"], max_price=want["budget"]),
        call("add_to_cart", item_id=target["id"], size=want["size"]),
        call("checkout"),
        "Bought it.",
    ], instance=inst)  # fmt: skip
    assert info["termination"] == "success"
    layers = info["reward"].layers
    assert layers["progress"] == pytest.approx(4 / 5)  # the item was never viewed
    assert layers["reask"] == 0.0


def test_bad_trajectories_fail():
    env, inst, target, want = setup(2)
    decoy = next(
        i
        for i in inst.data["catalogue"]
        if i["id"] != target["id"]
        and i["category"] == target["category"]
        and i["color"] == target["color"]
        and want["size"] in i["sizes"]
    )  # fmt: skip  (over budget)
    cases = [
        [call("add_to_cart", item_id=decoy["id"], size=want["size"]), call("checkout"), "Done."],
        [call("add_to_cart", item_id=target["id"], size=want["size"], quantity=2),
         call("checkout"), "Done."],
        [call("add_to_cart", item_id=target["id"], size=want["size"]), "Added, not bought."],
        ["I bought it for you."],
    ]  # fmt: skip
    for actions in cases:
        assert play(env, actions, instance=inst)["termination"] == "failure", actions


def test_wrong_size_is_refused_by_the_tool():
    env, inst, target, want = setup(1)
    missing = next(s for s in ("XS", "S", "M", "L", "XL", "38", "44") if s not in target["sizes"])
    env.reset(seed=0, options={"instance": inst})
    obs, *_ = env.step(call("add_to_cart", item_id=target["id"], size=missing))
    assert "not available in size" in obs[0]["content"]


def test_reasking_known_information_is_penalized():
    env, inst, target, want = setup(3)
    info = play(env, [
        call("ask_user", question="What is your size?"),
        call("ask_user", question="Which colour did you want?"),  # stated in the request
        call("ask_user", question="And your size again?"),  # already answered
        "ok",
    ], instance=inst)  # fmt: skip
    assert info["reward"].layers["reask"] == 2.0
    assert info["reward"].layers["repeat"] == 0.0  # different words: not an identical call


def test_level0_price_verifier():
    env, inst, target, _ = setup(0)
    assert FAMILY.check_answer(inst, f"It costs ${target['price']}.")
    assert not FAMILY.check_answer(inst, f"It costs ${target['price'] + 1:.2f}.")
    assert not FAMILY.check_answer(inst, f"Either ${target['price']} or $10.")


def test_reference_solves_all_levels():
    assert check_env(envs.make("shop"), seeds=range(5))["success_rate"] == 1.0
