"""Token-exact fields of a logged episode, compactly: what ``Trajectory.to_record`` writes under
``"tokens"`` and ``Trajectory.from_record`` reads back (``agentrl.offline.logs``).

A context (a whole episode, or one segment of an episode played with memory) is four
parallel lists: ids, loss mask, rollout log-probs, turn of each token. By the rollout's
contract the log-prob is 0.0 and the turn -1 wherever the mask is 0, and a run of mask-1
tokens is one assistant turn's sample, so the compact form stores:

    {"ids": [...], "mask_runs": [n0, n1, n0', ...],   # run lengths, mask 0 first
     "logprobs": [...],                              # at mask-1 tokens only
     "turns": [...]}                                 # one per mask-1 run

Log-probs are written as the shortest decimal that reads back to the same float32 (the
rollout samples in float32), so they round-trip exactly at float32 precision. A context that
breaks the contract is written in full (``"full": true``: the four lists as they are).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: The version of the token fields; records without ``"tokens"`` predate them.
TOKENS_VERSION = 1


def extend_context(ctx: Any, ids: list[int], logprobs: list[float] | None, turn: int) -> None:
    """Append ``ids`` to a growing context (anything with ``ids``, ``mask``, ``logprobs`` and
    ``turn_of_token`` lists): sampled by the policy (``logprobs`` given, turn ``turn``) or not
    (prompt, tool and environment tokens: mask 0, log-prob 0.0, turn -1)."""
    policy = logprobs is not None
    ctx.ids.extend(ids)
    ctx.mask.extend([int(policy)] * len(ids))
    ctx.logprobs.extend(logprobs if policy else [0.0] * len(ids))
    ctx.turn_of_token.extend([turn if policy else -1] * len(ids))


def _f32(x: float) -> float:
    """``x`` as the shortest decimal that reads back to the same float32."""
    return float(str(np.float32(x)))


def _runs(mask: list[int]) -> list[int]:
    """Alternating run lengths of ``mask``, the first one of zeros (maybe 0 long)."""
    runs, current, n = [], 0, 0
    for m in mask:
        if m != current:
            runs.append(n)
            current, n = m, 0
        n += 1
    runs.append(n)
    return runs


def encode_context(
    ids: list[int], mask: list[int], logprobs: list[float], turns: list[int]
) -> dict[str, Any]:
    """One context's token fields in the compact form (full lists where it cannot be)."""
    if not len(ids) == len(mask) == len(logprobs) == len(turns):
        raise ValueError(
            f"token fields differ in length: token_ids {len(ids)}, loss_mask {len(mask)}, "
            f"logprobs {len(logprobs)}, turn_of_token {len(turns)}"
        )
    mask = [int(m) for m in mask]
    compact = set(mask) <= {0, 1} and all(
        lp == 0.0 and t == -1 for m, lp, t in zip(mask, logprobs, turns, strict=True) if not m
    )
    run_turns: list[int] = []
    if compact:
        for i, m in enumerate(mask):
            if m and (i == 0 or not mask[i - 1]):
                run_turns.append(int(turns[i]))
            elif m and turns[i] != run_turns[-1]:
                compact = False  # a turn change inside a run of sampled tokens
                break
    out: dict[str, Any] = {"v": TOKENS_VERSION, "ids": [int(i) for i in ids]}
    if not compact:
        return out | {"full": True, "mask": mask, "logprobs": [_f32(x) for x in logprobs],
                      "turns": [int(t) for t in turns]}  # fmt: skip
    sampled = [_f32(lp) for m, lp in zip(mask, logprobs, strict=True) if m]
    return out | {"mask_runs": _runs(mask), "logprobs": sampled, "turns": run_turns}


def decode_context(rec: dict[str, Any]) -> tuple[list[int], list[int], list[float], list[int]]:
    """(token_ids, loss_mask, logprobs, turn_of_token) of one encoded context."""
    ids = list(rec["ids"])
    if rec.get("full"):
        return ids, list(rec["mask"]), list(rec["logprobs"]), list(rec["turns"])
    mask: list[int] = []
    for k, n in enumerate(rec["mask_runs"]):
        mask.extend([k % 2] * n)
    if len(mask) != len(ids):
        raise ValueError(f"mask_runs cover {len(mask)} tokens but there are {len(ids)} ids")
    starts = sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))
    if len(rec["logprobs"]) != sum(mask) or len(rec["turns"]) != starts:
        raise ValueError(
            f"{len(rec['logprobs'])} logprobs and {len(rec['turns'])} turns for {sum(mask)} "
            f"sampled tokens in {starts} runs"
        )
    sampled, run_turns = iter(rec["logprobs"]), iter(rec["turns"])
    logprobs, turns, turn = [], [], -1
    for i, m in enumerate(mask):
        if m and (i == 0 or not mask[i - 1]):
            turn = next(run_turns)
        logprobs.append(next(sampled) if m else 0.0)
        turns.append(turn if m else -1)
    return ids, mask, logprobs, turns
