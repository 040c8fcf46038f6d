"""Episodes played in several contexts (hierarchical memory): one training row per segment,
every row trained with its episode's advantage.

Group baselines count episodes, not segments: advantages are computed on the N episodes
(``compute_advantages``) and then broadcast to the R >= N rows. A plain episode is one row.
With ``loss_agg='seq-mean'`` each segment is a sequence of its own (an episode played in
more contexts weighs more); token-level aggregations weigh every sampled token once.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from agentrl.algos.batch import Batch, build_batch
from agentrl.types import Trajectory


def segment_rows(trajs: list[Trajectory]) -> tuple[list[Trajectory], torch.Tensor]:
    """``(rows, episode_of_row)``: one trajectory per context of each episode, in order (an
    episode's segments consecutive), and the index (R,) of each row's episode in ``trajs``."""
    rows: list[Trajectory] = []
    owner: list[int] = []
    for n, traj in enumerate(trajs):
        if not traj.segments:
            rows.append(traj)
            owner.append(n)
            continue
        for k, seg in enumerate(traj.segments):
            rows.append(replace(
                traj, token_ids=seg.token_ids, loss_mask=seg.loss_mask, logprobs=seg.logprobs,
                turn_of_token=seg.turn_of_token, messages=seg.messages, segments=[],
                info={**traj.info, "segment": k, "segment_of": n},
            ))  # fmt: skip
            owner.append(n)
    return rows, torch.tensor(owner, dtype=torch.long)  # (R,)


def broadcast_to_rows(
    values: torch.Tensor,  # (N,) per-episode values: advantages, validity, rewards
    episode_of_row: torch.Tensor,  # (R,) index of each row's episode
) -> torch.Tensor:  # (R,) each row gets its episode's value
    """Per-episode values spread over the episodes' rows (segments)."""
    return values[episode_of_row]  # (R,)


def segment_batch(
    trajs: list[Trajectory],
    valid: torch.Tensor,  # (N,) bool per-episode validity
    pad_id: int,
) -> tuple[Batch, torch.Tensor]:
    """The rollout tensors of every segment row (``build_batch``, a row valid when its episode
    is) and the row -> episode index (R,), to spread advantages with ``broadcast_to_rows``."""
    rows, owner = segment_rows(trajs)
    return build_batch(rows, broadcast_to_rows(valid, owner), pad_id), owner
