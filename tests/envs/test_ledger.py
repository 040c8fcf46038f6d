"""The ledger family (long horizon) and its recall variant: the reference solves every level in
the stated number of turns, the verifier, determinism, process rewards, snapshots, budgets."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from envhelpers import call, play

import agentrl.envs as envs
from agentrl.envs import check_env
from agentrl.envs.reference import run_reference_episode
from agentrl.envs.tasks.ledger import LEVELS, LedgerFamily, answer_numbers
from agentrl.envs.tasks.ledger_tools import TRANSACTIONS_PER_PAGE, pages

PRESET = Path(__file__).resolve().parents[2] / "configs" / "smollm2_ledger.yaml"
CALLS = {1: 11, 2: 19, 3: 30}  # reference calls per level (the module docstring's table)


def played(env_id: str, level: int, seed: int = 4):
    """A finished reference episode: (env, its final info)."""
    env = envs.make(env_id)
    _, info = run_reference_episode(env, seed=seed, level=level)
    return env, info


def test_registered_with_room_for_level_3():
    assert {"ledger", "ledger_recall"} <= set(envs.list_envs())
    env = envs.make("ledger_recall")
    assert env.max_turns == 40 and env.family.recall and env.family.name == "ledger_recall"
    names = [s["function"]["name"] for s in env.tool_schemas]
    assert names == ["list_accounts", "get_balance", "get_transactions", "record"]


@pytest.mark.parametrize("env_id", ["ledger", "ledger_recall"])
def test_reference_solves_every_level(env_id):
    report = check_env(envs.make(env_id), seeds=range(4))
    assert report == {"episodes": 12, "success_rate": 1.0}


def test_turn_counts_grow_with_the_level():
    env = envs.make("ledger")
    for level, calls in CALLS.items():
        for seed in range(5):
            messages, info = run_reference_episode(env, seed=seed, level=level)
            made = sum(len(m.get("tool_calls", [])) for m in messages)
            assert made == calls and info["turn"] == calls + 1  # one call per turn, then answer
            assert info["success"]
    assert 8 <= CALLS[1] <= 12 and 25 <= CALLS[3] <= 40


def test_instances_are_deterministic_and_well_formed():
    fam = LedgerFamily()
    for level, (n_accounts, k, target_pages) in LEVELS.items():
        for seed in range(10):
            a, b = (fam.sample(random.Random(seed), level) for _ in range(2))
            assert a == b
            accounts = a.data["accounts"]
            openings = [x["opening"] for x in accounts]
            assert len(accounts) == n_accounts and len(set(openings)) == n_accounts
            top = sorted(accounts, key=lambda x: -x["opening"])[:k]
            assert a.data["targets"] == [x["id"] for x in top]
            assert all(pages(x["transactions"], TRANSACTIONS_PER_PAGE) == target_pages for x in top)
            assert accounts[0]["id"] not in a.data["targets"]  # the recall question's account
    prompts = {fam.sample(random.Random(s), 2).prompt for s in range(10)}
    assert len(prompts) == 10


def test_figures_and_reference_answer_agree_with_the_world():
    env, info = played("ledger", 2)
    inst = env.instance
    figs = LedgerFamily.figures(inst)
    for tid, f in figs.items():
        account = next(a for a in inst.data["accounts"] if a["id"] == tid)
        assert f["closing"] == account["opening"] + f["flow"] + inst.data["adjustments"][tid]
    answer = env.messages[-1]["content"]
    total = sum(f["closing"] for f in figs.values())
    assert answer.endswith(f"Total closing balance: {total}.") and info["success"]


def _replace_number(text: str, old: int, new: int) -> str:
    assert f" {old}" in text
    return text.replace(f" {old}", f" {new}", 1)


def _swap(text: str, x: str, y: str) -> str:
    return text.replace(x, "\0").replace(y, x).replace("\0", y)


def test_verifier_rejects_wrong_answers():
    env, _ = played("ledger", 2)
    fam, inst = env.family, env.instance
    good = env.messages[-1]["content"]
    (a, fa), (b, fb) = LedgerFamily.figures(inst).items()
    other = next(x for x in inst.data["accounts"] if x["id"] not in (a, b))
    assert fam.check_answer(inst, good)
    spelled = good.replace(f"closing {fa['closing']}", f"closing ${fa['closing']:,}.00")
    assert spelled != good and fam.check_answer(inst, spelled)
    listed_first = f"The two largest are {_name(inst, a)} and {_name(inst, b)}. {good}"
    assert fam.check_answer(inst, listed_first)
    wrong = {
        "off by one": _replace_number(good, fa["closing"], fa["closing"] + 1),
        "closings swapped": _swap(good, f"closing {fa['closing']}", f"closing {fb['closing']}"),
        "no total": good.split(". Total")[0] + ".",
        "a guessed number": good + f" {other['name']} had {other['opening']}.",
        "a target not named": good.replace(_name(inst, b), "the other").replace(b, "the other"),
        "empty": " ",
        "too long": good + " ." * 400,
    }
    for why, answer in wrong.items():
        assert not fam.check_answer(inst, answer), why


def _name(inst, tid: str) -> str:
    return next(a["name"] for a in inst.data["accounts"] if a["id"] == tid)


def test_verifier_checks_the_journal():
    env, info = played("ledger", 1, seed=7)
    answer, fam = env.messages[-1]["content"], env.family
    assert info["success"]
    inst = fam.sample(random.Random(7), 1)  # the same instance, no session yet
    assert not fam.check_answer(inst, answer)  # nothing posted
    (tid,) = inst.data["targets"]
    adj, memo = inst.data["adjustments"][tid], inst.data["memo"]
    post = call("record", account=tid, amount=adj, memo=memo)
    elsewhere = call("record", account=inst.data["accounts"][0]["id"], amount=adj, memo=memo)
    cases = {
        "posted": ([post], True),
        "as a float, by name": ([call("record", account=_name(inst, tid), amount=float(adj),
                                      memo="other words")], True),
        "twice": ([post, post], False),
        "wrong sign": ([call("record", account=tid, amount=-adj, memo=memo)], False),
        "also elsewhere": ([post, elsewhere], False),
    }  # fmt: skip
    for why, (actions, ok) in cases.items():
        info = play(env, [*actions, answer], instance=inst, seed=7)
        assert info["success"] is ok, why


def test_recall_variant_needs_the_early_value_and_refuses_rereads():
    env, info = played("ledger_recall", 3)
    fam, inst = env.family, env.instance
    answer = env.messages[-1]["content"]
    first = inst.data["accounts"][0]
    assert info["success"] and f"opened at {first['opening']}." in answer
    assert not fam.check_answer(inst, answer.split(" The first account")[0])
    assert not fam.check_answer(
        inst, _replace_number(answer, first["opening"], first["opening"] + 5)
    )
    env.reset(seed=1, options={"level": 1})
    account = env.instance.data["accounts"][0]
    env.step(call("get_balance", account=account["id"]))
    obs, *_ = env.step(call("get_balance", account=account["name"]))  # same account, other name
    assert '"error": "already_read"' in obs[0]["content"]
    _, _, _, _, info = env.step("I do not know.")
    assert info["reward"].layers["reask"] == 1.0 and info["reward"].layers["repeat"] == 0.0


def test_process_rewards():
    env, info = played("ledger", 3)
    layers = info["reward"].layers
    assert layers["progress"] == 1.0 and layers["reask"] == 0.0 and layers["completion"] == 1.0
    env.reset(seed=4, options={"level": 3})
    inst = env.instance
    lookups = [c for c in inst.expected_calls if c.name != "record"][:6]
    first = inst.data["accounts"][1]
    actions = [call(c.name, **c.arguments) for c in lookups]
    actions += [call("get_balance", account=first["name"]),  # known, under another name
                call("record", account=inst.data["targets"][0], amount=1, memo="x"),  # wrong amount
                "No idea."]  # fmt: skip
    info = play(env, actions, instance=inst, seed=4)
    assert info["termination"] == "failure"
    assert info["reward"].layers["progress"] == pytest.approx(6 / CALLS[3])
    assert info["reward"].layers["reask"] == 1.0
    assert info["reward"].weights["progress"] > 0 > info["reward"].weights["reask"]


@pytest.mark.parametrize("env_id", ["ledger", "ledger_recall"])
def test_snapshot_round_trip_mid_episode(env_id):
    env = envs.make(env_id)
    env.reset(seed=2, options={"level": 3})
    for _ in range(12):  # past the balances of the first three pages
        env.step(env.reference_action())
    snap = env.snapshot()
    at_snapshot = [dict(m) for m in env.messages]
    original, end = run_to_end(env)
    assert end["success"] and snap.turn == 12
    for target in (env, envs.make(env_id)):
        assert target.restore(snap) == at_snapshot
        if env_id == "ledger_recall":  # the read counters came back too: a re-read is refused
            target.restore(snap)
            first = target.instance.data["accounts"][0]["id"]
            obs, *_ = target.step(call("get_balance", account=first))
            assert "already_read" in obs[0]["content"]
            target.restore(snap)
        messages, info = run_to_end(target)
        assert info["success"] and messages == original


def run_to_end(env):
    for _ in range(env.max_turns):
        *_, terminated, truncated, info = env.step(env.reference_action())
        if terminated or truncated:
            return [dict(m) for m in env.messages], info
    raise AssertionError("no end")


def test_answer_numbers():
    assert answer_numbers("A104: opening $1,234.00, closing \u2212250; total 12,345,678") == [
        1234.0,
        -250.0,
        12345678.0,
    ]
    assert answer_numbers("1,23 and 2025-03-07") == [1.0, 23.0, 2025.0, 3.0, 7.0]


def real_tokenizer():
    """SmolLM2's tokenizer when its converted copy is cached (no conversion in a test)."""
    try:
        from transformers import AutoTokenizer

        from agentrl.policy.gguf import cache_dir_for
        from agentrl.policy.packaged import PackageMissingError, packaged_file

        path = cache_dir_for(packaged_file("agentrl/smollm2-135m"), "qwen2.5")
    except (ImportError, PackageMissingError) as e:
        pytest.skip(f"SmolLM2 is not installed: {e}")
    if not (path / "BUILD_COMPLETE").exists():
        pytest.skip("SmolLM2's converted tokenizer is not cached (run the model once)")
    return AutoTokenizer.from_pretrained(path)


def test_reference_episodes_fit_the_preset_budget_except_level_3():
    from agentrl.chat.render import encode_conversation
    from agentrl.config import load_config

    cfg = load_config(PRESET)
    budget, turn_budget = cfg.rollout.max_total_tokens, cfg.rollout.max_new_tokens
    assert cfg.task.env == "ledger" and cfg.task.max_turns >= 40 and budget <= 8192
    tok = real_tokenizer()
    for env_id in ("ledger", "ledger_recall"):
        env = envs.make(env_id)
        for level in (1, 2, 3):
            for seed in range(3):
                messages, _ = run_reference_episode(env, seed=seed, level=level)
                ids, mask = encode_conversation(tok, messages, env.tool_schemas)
                turns = "".join(map(str, mask)).split("0")
                assert max(map(len, turns)) <= turn_budget
                if level < 3:  # full history fits, with room for a few retries
                    assert len(ids) <= budget - 600, (env_id, level, len(ids))
                else:  # level 3 needs memory under the preset, but fits the model whole
                    assert budget < len(ids) <= 6144, (env_id, level, len(ids))


@pytest.mark.parametrize("level", [1, 2, 3])
def test_running_top_notes_track_the_largest_balances_read(level):
    """``running_top``: before each call after the first balance, the reference names the k
    largest balances read so far (checked against the world); its episodes still succeed and
    render back to exactly the text it wrote; off by default."""
    from agentrl.chat.render import assistant_body
    from agentrl.tiny.builder import corpus_texts, train_tokenizer

    tok = train_tokenizer(corpus_texts(50, seed=1), vocab_size=300)
    env = envs.make("ledger", running_top=True)
    env.reset(seed=7, options={"level": level})
    opening = {a["id"]: a["opening"] for a in env.instance.data["accounts"]}
    k, read, notes = len(env.instance.data["targets"]), [], 0
    for _ in range(env.max_turns):
        action = env.reference_action()
        note = action.split("<tool_call>")[0].strip()
        top = sorted(read, key=lambda a: -opening[a])[:k]
        assert note == ("Largest so far: " + ", ".join(f"{a} {opening[a]}" for a in top) + "."
                        if top and "<tool_call>" in action else note)  # fmt: skip
        notes += bool(note) and "<tool_call>" in action
        _, _, done, _, info = env.step(action)
        if done:
            break
        assert assistant_body(tok, env.messages[-2], env.tool_schemas) == action  # token-exact
        last = env.call_log[-1]
        if last["name"] == "get_balance" and last["ok"]:
            read.append(last["arguments"]["account"])
    assert info["success"] and notes == CALLS[level] - 2  # every call after the first balance
    assert sorted(read, key=lambda a: -opening[a])[:k] == env.instance.data["targets"]
    plain = envs.make("ledger")
    plain.reset(seed=7, options={"level": level})
    for _ in range(3):
        action = plain.reference_action()
        assert action.startswith("<tool_call>")
        plain.step(action)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_compare_notes_set_each_new_balance_against_the_kth_largest(level):
    """``compare``: right after each balance past the first k, the note opens with that balance
    against the smallest of the earlier k largest ("A433 597 < A367 6649."), then the running
    top; elsewhere the plain note; the episode still succeeds and every turn renders back to
    exactly the text written ("<" and ">" included)."""
    from agentrl.chat.render import assistant_body
    from agentrl.tiny.builder import corpus_texts, train_tokenizer

    tok = train_tokenizer(corpus_texts(50, seed=1), vocab_size=300)
    env = envs.make("ledger", running_top=True, compare=True)
    env.reset(seed=7, options={"level": level})
    k, read, comparisons = len(env.instance.data["targets"]), [], 0
    for _ in range(env.max_turns):
        action = env.reference_action()
        note = action.split("<tool_call>")[0].strip()
        last = env.call_log[-1] if env.call_log else None
        if last and last["name"] == "get_balance" and len(read) > k:
            (new, value), earlier = read[-1], sorted(read[:-1], key=lambda r: -r[1])[:k]
            kth, kth_value = earlier[-1]
            sign = ">" if value > kth_value else "<"
            assert note.startswith(f"{new} {value} {sign} {kth} {kth_value}. Largest so far: ")
            comparisons += 1
        elif "<tool_call>" in action:  # (the final answer has no note)
            assert note == "" or note.startswith("Largest so far: ")
        _, _, done, _, info = env.step(action)
        if done:
            break
        assert assistant_body(tok, env.messages[-2], env.tool_schemas) == action
        last = env.call_log[-1]
        if last["name"] == "get_balance" and last["ok"]:
            balance = json.loads(last["content"])["opening_balance"]
            read.append((last["arguments"]["account"], balance))
    assert info["success"] and comparisons == len(env.instance.data["accounts"]) - k


@pytest.mark.parametrize("level", [1, 2, 3])
@pytest.mark.parametrize("running_top", [False, True])
def test_next_step_notes_name_the_call_made_and_then_the_answer(level, running_top):
    """``next_step``: every reference turn, the answer included, opens with a note ending in
    the step it takes ("Next: A367's transactions, page 2." before that very call, "Next: the
    answer." before the answer); the episode still succeeds, every call turn renders back
    token-exact, and the running notes read as before (``ledger_audit.note_accounts``)."""
    from agentrl.chat.render import assistant_body
    from agentrl.envs.tasks.ledger_audit import note_accounts
    from agentrl.tiny.builder import corpus_texts, train_tokenizer

    tok = train_tokenizer(corpus_texts(50, seed=1), vocab_size=300)
    env = envs.make("ledger", next_step=True, running_top=running_top, compare=running_top)
    env.reset(seed=7, options={"level": level})
    words = {"list_accounts": "page {page} of the accounts", "get_balance": "{account}'s balance",
             "get_transactions": "{account}'s transactions, page {page}",
             "record": "the posting to {account}"}  # fmt: skip
    steps = []
    for _ in range(env.max_turns):
        action = env.reference_action()
        note, _, rest = action.partition("\n")
        if running_top and len(steps) >= 2:  # a balance is in from the third turn on
            assert "Largest so far: " in note
        else:
            assert note.startswith("Next: ")
        if rest.startswith("<tool_call>"):
            made = json.loads(rest.split("\n")[1])
            assert note.endswith(f"Next: {words[made['name']].format(**made['arguments'])}.")
        else:
            assert note.endswith("Next: the answer.") and "<tool_call>" not in rest
        steps.append(note)
        listed = note_accounts(note)
        assert (listed is not None) == ("Largest so far" in note)
        _, _, done, _, info = env.step(action)
        if done:
            break
        assert assistant_body(tok, env.messages[-2], env.tool_schemas) == action
    assert info["success"] and len(steps) == CALLS[level] + 1
    assert all(not s.startswith("Next: the answer") for s in steps[:-1])
