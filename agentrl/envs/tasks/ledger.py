"""Ledger: a long-horizon reconciliation that needs memory (``make("ledger")``,
``make("ledger_recall")``).

Each instance draws a chart of 6-14 accounts (id, name, a distinct opening balance) listed 4
per page, each with one to three pages of bank transactions (5 per page, with a
``page_total``). Tools: ``list_accounts(page)``, ``get_balance(account)`` (the opening
balance), ``get_transactions(account, page)`` and ``record(account, amount, memo)`` (posts a
late adjustment). The user asks for the k accounts with the largest opening balances, to post
a given adjustment to each, and for each one's opening and closing balance (opening + every
transaction + the adjustment) and, for k > 1, their total. The balances are read one account
per turn near the start; the answer needs them at the end, after the transaction pages and
the postings: facts fetched early are needed late (a long context, or memory, must hold them).

Levels (reference solver: one call per turn, then the answer):

| level | accounts | targets k | transaction pages per target | calls | turns |
| --- | --- | --- | --- | --- | --- |
| 1 | 6 | 1 | 2 | 11 | 12 |
| 2 | 10 | 2 | 2 | 19 | 20 |
| 3 | 14 | 3 | 3 | 30 | 31 |

``ledger_recall`` (``LedgerFamily(recall=True)``), the auxiliary memory task: the same
episode, and the last question asks for the opening balance of the first account on page 1,
read in the second turn; ``get_balance`` answers each account once (a second read is an
``already_read`` error), so the value must come from the episode's memory.

Verifier: the journal holds exactly one posting per target with the asked amount and none
elsewhere; each target's closing balance follows a mention of it (id or name) before another
account is named (so swapped balances fail), the total appears (k > 1), the recall value appears
(``ledger_recall``), and every number is one of the targets' openings, closings, transaction
sums, adjustments or total (or the recall value), so listing guesses fails. Amounts may carry
thousands separators, a currency sign or ``.00``. Answers over 800 characters fail.
``running_top=True`` (``task.env_kwargs.running_top``) makes the reference solver write the
k largest balances read so far before each call (``reference_note``), so its demonstrations
teach a running comparison, one new balance a turn, instead of a choice among all of them at
once; the task and its verifier are unchanged. ``compare=True`` with it writes the comparison
itself first when a new balance comes in ("A433 597 < A367 6649. Largest so far: A367 6649."):
without it, the level-1 warm start's notes mostly kept or copied a balance without comparing
(bench/README.md). ``next_step=True`` makes every reference turn open with a note that ends
by naming the step it takes ("Next: A367's transactions, page 2.", "Next: the posting to
A367.", "Next: the answer."), the answer turn included: a turn's first token then never
chooses between a call and the answer, and stopping becomes a named step (the comparison
warm start opened its answer turn with a call in 8 of 8 teacher-forced episodes).
Process layers: ``progress`` (share of the reference's calls made, postings checked in the
journal) and ``reask`` (a balance read again under another name, refused re-reads).
"""

from __future__ import annotations

import random
import re
from typing import Any

from agentrl.envs.reference import successful_results
from agentrl.envs.task import TaskFamily, TaskInstance
from agentrl.envs.tasks.ledger_tools import (
    ACCOUNTS_PER_PAGE,
    TRANSACTIONS_PER_PAGE,
    build_tools,
    pages,
    sample_accounts,
)
from agentrl.envs.tasks.shaped import duplicate_results
from agentrl.tools.registry import Tool
from agentrl.types import ToolCall

#: level -> (accounts, targets, transaction pages of each target)
LEVELS: dict[int, tuple[int, int, int]] = {1: (6, 1, 2), 2: (10, 2, 2), 3: (14, 3, 3)}
ADJUST_MEMOS = ("late fee", "audit correction", "accrual", "bank charge", "year-end fix")
ORDINALS = ("largest", "second largest", "third largest")
#: tool -> the step its call takes, in words (``next_step_line``)
STEP_WORDS = {
    "list_accounts": "page {page} of the accounts",
    "get_balance": "{account}'s balance",
    "get_transactions": "{account}'s transactions, page {page}",
    "record": "the posting to {account}",
}
SYSTEM_PROMPT = (
    "You are a bookkeeping assistant. Use the tools, one call per turn. A closing balance is "
    "the opening balance plus all its transactions plus the adjustment you record. Write "
    "amounts as plain numbers."
)
RECALL_ASK = " Finally, tell me the opening balance of the first account on page 1 of the list."
MAX_ANSWER_CHARS = 800
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def answer_numbers(text: str) -> list[float]:
    """Numbers in ``text`` in order: ``1,234.00`` -> 1234.0, ``$-40`` -> -40.0, ``A104`` none."""
    text = _THOUSANDS_RE.sub("", text.replace("\u2212", "-"))
    return [float(n) for n in _NUMBER_RE.findall(text)]


def mentions(text: str, account: dict[str, Any]) -> list[int]:
    """Where ``text`` names ``account`` (its id or name, whole words, any case), in order."""
    folded = text.casefold()
    return sorted(
        m.start()
        for word in (account["id"], account["name"])
        for m in re.finditer(rf"(?<!\w){re.escape(word.casefold())}(?!\w)", folded)
    )


def paired(text: str, target: str, where: dict[str, list[int]], value: int) -> bool:
    """Does ``value`` follow a mention of ``target`` before any other account is named?"""
    others = sorted(p for acc, ps in where.items() if acc != target for p in ps)
    for start in where[target]:
        end = next((p for p in others if p > start), len(text))
        if float(value) in answer_numbers(text[start:end]):
            return True
    return False


def next_step_line(instance: TaskInstance, results: dict[int, Any]) -> str:
    """The step after ``results`` in words: the first expected call not yet answered, else the
    answer ("Next: page 2 of the accounts.", "Next: A433's balance.", "Next: A367's
    transactions, page 1.", "Next: the posting to A367.", "Next: the answer.")."""
    call = next((c for i, c in enumerate(instance.expected_calls) if i not in results), None)
    if call is None:
        return "Next: the answer."
    return f"Next: {STEP_WORDS[call.name].format(**call.arguments)}."


def _prompt(k: int, adjustments: list[int], memo: str, recall: bool) -> str:
    if k == 1:
        ask = (
            "Reconcile our ledger. Find the account with the largest opening balance and post a "
            f'late adjustment of {adjustments[0]:+d} to it with record (memo "{memo}"). Then '
            "tell me its name, opening balance and closing balance."
        )
    else:
        posts = [f"{a:+d} to the {o}" for a, o in zip(adjustments, ORDINALS, strict=False)]
        ask = (
            f"Reconcile our ledger. Find the {k} accounts with the largest opening balances and "
            f'post these late adjustments with record (memo "{memo}"): '
            f"{', '.join(posts[:-1])} and {posts[-1]}. Then tell me each one's name, opening "
            "balance and closing balance, and the total of their closing balances."
        )
    return ask + (RECALL_ASK if recall else "")


class LedgerFamily(TaskFamily):
    """Reconcile a paged ledger over 12-31 turns; the answer needs values read early."""

    name = "ledger"
    levels = (1, 2, 3)
    system_prompt = SYSTEM_PROMPT

    def __init__(self, recall: bool = False, running_top: bool = False,
                 compare: bool = False, next_step: bool = False) -> None:  # fmt: skip
        self.recall = bool(recall)
        self.running_top = bool(running_top)
        self.compare = bool(compare)
        self.next_step = bool(next_step)
        if self.recall:
            self.name = "ledger_recall"

    def sample(self, rng: random.Random, level: int) -> TaskInstance:
        """Accounts, the targets' adjustments, the prompt and the reference calls."""
        n_accounts, k, target_pages = LEVELS[level]
        accounts = sample_accounts(rng, n_accounts, k, target_pages)
        targets = sorted(accounts, key=lambda a: -a["opening"])[:k]
        adjustments = [rng.choice((-1, 1)) * rng.randrange(5, 155, 5) for _ in targets]
        memo = rng.choice(ADJUST_MEMOS)
        calls = []
        for p in range(pages(accounts, ACCOUNTS_PER_PAGE)):
            calls.append(ToolCall("list_accounts", {"page": p + 1}))
            rows = accounts[p * ACCOUNTS_PER_PAGE : (p + 1) * ACCOUNTS_PER_PAGE]
            calls += [ToolCall("get_balance", {"account": a["id"]}) for a in rows]
        for t, adj in zip(targets, adjustments, strict=True):
            n_pages = pages(t["transactions"], TRANSACTIONS_PER_PAGE)
            calls += [
                ToolCall("get_transactions", {"account": t["id"], "page": p + 1})
                for p in range(n_pages)
            ]
            calls.append(ToolCall("record", {"account": t["id"], "amount": adj, "memo": memo}))
        data = {
            "accounts": accounts,
            "targets": [t["id"] for t in targets],
            "adjustments": {t["id"]: a for t, a in zip(targets, adjustments, strict=True)},
            "memo": memo,
            "recall": accounts[0]["id"] if self.recall else None,
        }
        task_id = f"{self.name}-L{level}-{rng.getrandbits(32):08x}"
        return TaskInstance(task_id, level, _prompt(k, adjustments, memo, self.recall), data, calls)

    def tools(self, instance: TaskInstance) -> list[Tool]:
        """The ledger's tools, bound to a fresh session (journal, balance reads)."""
        state: dict[str, Any] = {}
        instance.data["session"] = state
        return build_tools(instance.data["accounts"], state, single_read=self.recall)

    # -- the verifier ---------------------------------------------------------------------
    @staticmethod
    def figures(instance: TaskInstance) -> dict[str, dict[str, int]]:
        """Per target id: ``opening``, ``flow`` (sum of transactions), ``adjust``, ``closing``."""
        by_id = {a["id"]: a for a in instance.data["accounts"]}
        out = {}
        for tid in instance.data["targets"]:
            a, adj = by_id[tid], instance.data["adjustments"][tid]
            flow = sum(t["amount"] for t in a["transactions"])
            out[tid] = {"opening": a["opening"], "flow": flow, "adjust": adj,
                        "closing": a["opening"] + flow + adj}  # fmt: skip
        return out

    @staticmethod
    def journal_ok(instance: TaskInstance) -> bool:
        """Exactly the asked postings: one per target with its amount, none elsewhere."""
        records = instance.data.get("session", {}).get("records", [])
        got = sorted((r["account"], float(r["amount"])) for r in records)
        want = sorted((t, float(a)) for t, a in instance.data["adjustments"].items())
        return got == want

    def allowed_numbers(self, instance: TaskInstance) -> set[float]:
        """Numbers an answer may contain (the module docstring)."""
        figs = self.figures(instance).values()
        allowed = {float(abs(v)) for f in figs for v in f.values()}
        allowed |= {float(v) for f in figs for v in f.values()}
        allowed.add(float(sum(f["closing"] for f in figs)))
        allowed |= {float(i) for i in range(1, len(instance.data["targets"]) + 1)}
        if instance.data["recall"]:
            allowed.add(float(instance.data["accounts"][0]["opening"]))
        return allowed

    def check_answer(self, instance: TaskInstance, answer: str) -> bool:
        """The rule-based verifier (see the module docstring)."""
        if not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
            return False
        if not self.journal_ok(instance):
            return False
        numbers = answer_numbers(answer)
        if not set(numbers) <= self.allowed_numbers(instance):
            return False
        figs = self.figures(instance)
        where = {a["id"]: mentions(answer, a) for a in instance.data["accounts"]}
        if not all(paired(answer, tid, where, f["closing"]) for tid, f in figs.items()):
            return False
        if len(figs) > 1 and float(sum(f["closing"] for f in figs.values())) not in numbers:
            return False
        recall = instance.data["recall"]
        return not recall or float(instance.data["accounts"][0]["opening"]) in numbers

    # -- the reference solver's answer ------------------------------------------------------
    def reference_answer(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """The answer computed from the reference calls' results alone."""
        names, openings, flows, adjust = {}, {}, {}, {}
        first = None
        for i, call in enumerate(instance.expected_calls):
            r = results[i]
            if call.name == "list_accounts" and first is None:
                first = r["accounts"][0]["account"]
            elif call.name == "get_balance":
                names[r["account"]], openings[r["account"]] = r["name"], r["opening_balance"]
            elif call.name == "get_transactions":
                flows[r["account"]] = flows.get(r["account"], 0) + r["page_total"]
            elif call.name == "record":
                adjust[r["account"]] = r["amount"]
        k = len(adjust)
        top = sorted(openings, key=lambda a: -openings[a])[:k]
        closing = {a: openings[a] + flows[a] + adjust[a] for a in top}
        parts = [f"{names[a]} ({a}): opening {openings[a]}, closing {closing[a]}" for a in top]
        if k == 1:
            text = f"{parts[0]} (the largest opening balance)."
        else:
            text = "; ".join(parts) + f". Total closing balance: {sum(closing.values())}."
        if self.recall:
            text += f" The first account on page 1, {names[first]} ({first}), opened at "
            text += f"{openings[first]}."
        note = self.reference_note(instance, results) if self.next_step else ""
        return f"{note}\n{text}" if note else text

    def reference_note(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """With ``running_top``: the k largest opening balances read so far, largest first
        ("Largest so far: A511 5513, A104 4210."), written before every call once a balance
        is in; the choice of targets is then one comparison per turn against the last note.
        With ``compare`` too, a note right after a new balance first writes that comparison
        against the smallest of the earlier k ("A433 597 < A104 4210. Largest so far: ...").
        With ``next_step``, the note ends with the step taken next (``next_step_line``)."""
        step = next_step_line(instance, results) if self.next_step else ""
        top = self.running_note(instance, results) if self.running_top else ""
        return " ".join(part for part in (top, step) if part)

    def running_note(self, instance: TaskInstance, results: dict[int, Any]) -> str:
        """The ``running_top`` part of ``reference_note`` (with ``compare``'s comparison)."""
        k = len(instance.data["targets"])
        reads = sorted(
            (i, r["opening_balance"], r["account"])
            for i, r in results.items()
            if instance.expected_calls[i].name == "get_balance" and isinstance(r, dict)
        )  # in the order read: the reference makes its calls in order
        top = sorted(((v, a) for _, v, a in reads), reverse=True)[:k]
        if not top:
            return ""
        note = "Largest so far: " + ", ".join(f"{a} {v}" for v, a in top) + "."
        if self.compare and len(reads) > k and reads[-1][0] == max(results):
            _, value, account = reads[-1]
            kth_value, kth_account = sorted(((v, a) for _, v, a in reads[:-1]), reverse=True)[k - 1]
            sign = ">" if value > kth_value else "<"
            note = f"{account} {value} {sign} {kth_account} {kth_value}. {note}"
        return note

    # -- process rewards -------------------------------------------------------------------
    def process_layers(self, instance: TaskInstance, call_log: list[dict]) -> dict[str, float]:
        """``progress``: share of the reference's calls made (postings read from the journal);
        ``reask``: balances re-read under another name plus refused re-reads."""
        expected = instance.expected_calls
        lookups = [c for c in expected if c.name != "record"]
        made = len(successful_results(lookups, call_log))
        session = instance.data.get("session", {})
        posted = {(r["account"], float(r["amount"])) for r in session.get("records", [])}
        made += sum((t, float(a)) in posted for t, a in instance.data["adjustments"].items())
        reasks = duplicate_results(call_log) + session.get("rereads", 0)
        return {"progress": made / len(expected), "reask": float(reasks)}
