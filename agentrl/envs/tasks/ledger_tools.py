"""The ledger family's world and tools (see ``ledger.py``): a paged chart of accounts, opening
balances, paged bank transactions and a journal for late adjustments."""

from __future__ import annotations

import random
from typing import Any

from agentrl.envs.tasks.names import name_key
from agentrl.tools.registry import Tool, tool

ACCOUNT_NAMES = (
    "Payroll", "Rent", "Marketing", "Travel", "Supplies", "Utilities", "Insurance", "Equipment",
    "Software", "Training", "Legal", "Catering", "Freight", "Maintenance", "Research",
    "Security", "Taxes", "Licensing", "Recruiting", "Consulting", "Cleaning", "Telecom",
)  # fmt: skip
MEMOS = (
    "invoice", "refund", "card payment", "wire transfer", "standing order", "cash deposit",
    "bank fee", "direct debit", "cheque", "supplier payment", "client payment", "reversal",
)  # fmt: skip
ACCOUNTS_PER_PAGE = 4
TRANSACTIONS_PER_PAGE = 5
OPENING_RANGE = (500, 9000)  # whole currency units, distinct across an instance's accounts
AMOUNT_RANGE = (-400, 400)  # a bank transaction, never 0
ALREADY_READ = "already_read"


def _transactions(rng: random.Random, pages: int) -> list[dict[str, Any]]:
    """Between ``pages - 1`` full pages plus one and ``pages`` full pages of transactions."""
    n = rng.randint((pages - 1) * TRANSACTIONS_PER_PAGE + 1, pages * TRANSACTIONS_PER_PAGE)
    rows = []
    for day in sorted(rng.choices(range(1, 29), k=n)):
        amount = 0
        while amount == 0:
            amount = rng.randint(*AMOUNT_RANGE)
        rows.append({"id": f"T{rng.randrange(10_000, 100_000)}", "date": f"2025-03-{day:02d}",
                     "amount": amount, "memo": rng.choice(MEMOS)})  # fmt: skip
    return rows


def sample_accounts(
    rng: random.Random, n_accounts: int, n_targets: int, target_pages: int
) -> list[dict[str, Any]]:
    """``n_accounts`` accounts in listing order; the ``n_targets`` largest opening balances
    have exactly ``target_pages`` pages of transactions, the others one or two, and the first
    listed account is never one of the targets (it is the recall variant's question)."""
    names = rng.sample(ACCOUNT_NAMES, n_accounts)
    ids = sorted(rng.sample(range(100, 1000), n_accounts))
    openings = rng.sample(range(*OPENING_RANGE), n_accounts)
    top = set(sorted(openings, reverse=True)[:n_targets])
    first_target = next(i for i, o in enumerate(openings) if o in top)
    if first_target == 0:  # swap a non-target into the first position
        other = next(i for i, o in enumerate(openings) if o not in top)
        openings[0], openings[other] = openings[other], openings[0]
    accounts = []
    for i in range(n_accounts):
        n_pages = target_pages if openings[i] in top else rng.randint(1, 2)
        accounts.append({"id": f"A{ids[i]}", "name": names[i], "opening": openings[i],
                         "transactions": _transactions(rng, n_pages)})  # fmt: skip
    return accounts


def pages(rows: list, per_page: int) -> int:
    """How many pages ``rows`` fill (at least one)."""
    return max(1, -(-len(rows) // per_page))


def _page(rows: list, page: Any, per_page: int, what: str) -> tuple[int, int, list]:
    """(page, pages, rows of that page); an unknown page is a ``ValueError`` for the model."""
    total = pages(rows, per_page)
    try:
        p = int(page)
    except (TypeError, ValueError):
        raise ValueError(f"page must be a whole number from 1 to {total}, got {page!r}.") from None
    if not 1 <= p <= total:
        raise ValueError(f"{what} has {total} page(s); page {p} does not exist.")
    return p, total, rows[(p - 1) * per_page : p * per_page]


def build_tools(
    accounts: list[dict[str, Any]], state: dict[str, Any], single_read: bool
) -> list[Tool]:
    """``list_accounts``, ``get_balance``, ``get_transactions``, ``record``, bound to one session.

    ``state`` collects ``records`` (posted adjustments), ``reads`` (balance reads per account)
    and ``rereads`` (refused second reads, ``single_read`` only: the recall variant).
    """
    by_key = {name_key(a["id"]): a for a in accounts} | {name_key(a["name"]): a for a in accounts}
    known = ", ".join(a["id"] for a in accounts)
    state.setdefault("records", [])
    state.setdefault("reads", {})
    state.setdefault("rereads", 0)

    def find(account: Any) -> dict[str, Any]:
        found = by_key.get(name_key(account))
        if found is None:
            raise ValueError(f"Unknown account {account!r}; known accounts: {known}.")
        return found

    @tool
    def list_accounts(page: int = 1) -> dict:
        """One page of the chart of accounts (id and name, 4 per page).

        Args:
            page: Page number, from 1.
        """
        p, total, rows = _page(accounts, page, ACCOUNTS_PER_PAGE, "The chart of accounts")
        return {"page": p, "pages": total,
                "accounts": [{"account": a["id"], "name": a["name"]} for a in rows]}  # fmt: skip

    @tool
    def get_balance(account: str) -> dict:
        """The opening balance of an account for the period.

        Args:
            account: Account id (e.g. "A104") or name.
        """
        a = find(account)
        reads = state["reads"][a["id"]] = state["reads"].get(a["id"], 0) + 1
        if single_read and reads > 1:
            state["rereads"] += 1
            told = f"The balance of {a['id']} was already read; use the value you got."
            return {"error": ALREADY_READ, "message": told}
        return {"account": a["id"], "name": a["name"], "opening_balance": a["opening"]}

    @tool
    def get_transactions(account: str, page: int = 1) -> dict:
        """One page of an account's bank transactions this period (5 per page).

        Args:
            account: Account id (e.g. "A104") or name.
            page: Page number, from 1.
        """
        a = find(account)
        p, total, rows = _page(a["transactions"], page, TRANSACTIONS_PER_PAGE, a["id"])
        return {"account": a["id"], "page": p, "pages": total, "transactions": rows,
                "page_total": sum(r["amount"] for r in rows)}  # fmt: skip

    @tool
    def record(account: str, amount: float, memo: str) -> dict:
        """Post a journal entry (an adjustment) to an account.

        Args:
            account: Account id (e.g. "A104") or name.
            amount: Signed amount: positive adds to the balance, negative takes from it.
            memo: Why, e.g. "late fee".
        """
        a = find(account)
        value = float(amount)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"amount must be a finite number, got {amount!r}.")
        amount = int(value) if value.is_integer() else round(value, 2)
        entry = {"entry": f"J{len(state['records']) + 1:03d}", "account": a["id"],
                 "amount": amount, "memo": str(memo), "status": "posted"}  # fmt: skip
        state["records"].append(entry)
        return entry

    return [list_accounts, get_balance, get_transactions, record]
