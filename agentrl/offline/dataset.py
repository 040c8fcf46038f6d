"""Logged episodes as a Hugging Face ``datasets`` dataset (``agentrl export-data``), in TRL's
conversational formats:

* ``sft``: one row per successful episode: ``messages`` (the whole dialogue, tool calls and
  tool results included) and ``tools`` (the schemas the policy was shown), for
  ``SFTTrainer``;
* ``dpo``: one row per preference pair (``agentrl.offline.dpo.log_pairs``): ``prompt`` (the
  messages before the first assistant turn), ``chosen`` and ``rejected`` (each episode's
  messages from there on) and ``tools``, for ``DPOTrainer``.

Messages and schemas are stored with ``datasets.Json`` (tool-call arguments have a different
shape per tool, which a fixed Arrow struct would pad with nulls), so a row reads back exactly
as logged. The tools come from the logged prompt's ``<tools>`` block: what the policy saw.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentrl.offline.dpo import log_pairs
from agentrl.offline.logs import LoggedEpisode, load_logs, prompt_ids
from agentrl.types import Message

FORMATS = ("sft", "dpo")


def _datasets():
    try:
        import datasets
    except ImportError as err:
        raise ImportError(
            "agentrl export-data needs the datasets package: pip install 'agentrl[data]'"
        ) from err
    return datasets


def prompt_tools(text: str | None) -> list[dict[str, Any]]:
    """The tool schemas of a rendered prompt's ``<tools>`` block, one JSON object a line
    (agentrl's and Qwen2.5's template); [] where there is none."""
    block = re.search(r"^<tools>\n(.*?)\n</tools>$", text or "", re.S | re.M)
    if block is None:  # (the template's prose names "<tools></tools>" first: not a block)
        return []
    return [json.loads(line) for line in block.group(1).splitlines() if line.strip()]


def _tools(ep: LoggedEpisode, decode: Callable[[list[int]], str] | None) -> list[dict]:
    text = ep.prompt_text
    if text is None and decode is not None:
        text = decode(list(prompt_ids(ep.traj)))
    return prompt_tools(text)


def _split(messages: list[Message]) -> int:
    """Index of the first assistant message (where the prompt ends)."""
    return next((i for i, m in enumerate(messages) if m.get("role") == "assistant"),
                len(messages))  # fmt: skip


def sft_rows(episodes: list[LoggedEpisode], decode=None) -> list[dict[str, Any]]:
    """One row per successful episode (harness faults never succeed)."""
    return [{"messages": e.traj.messages, "tools": _tools(e, decode), "task_id": e.traj.task_id,
             "reward": e.traj.reward.total} for e in episodes if e.traj.success]  # fmt: skip


def dpo_rows(episodes: list[LoggedEpisode], min_gap: float = 0.0,
             decode=None) -> list[dict[str, Any]]:  # fmt: skip
    """One row per preference pair between episodes of one task instance."""
    trajs = [e.traj for e in episodes]
    rows = []
    for c, r in log_pairs(trajs, min_gap):
        chosen, rejected = trajs[c].messages, trajs[r].messages
        k = _split(chosen)
        rows.append({"prompt": chosen[:k], "chosen": chosen[k:],
                     "rejected": rejected[_split(rejected):],
                     "tools": _tools(episodes[c], decode), "task_id": trajs[c].task_id,
                     "chosen_reward": trajs[c].reward.total,
                     "rejected_reward": trajs[r].reward.total})  # fmt: skip
    return rows


def _features(fmt: str):
    ds = _datasets()
    conv = ds.List(ds.Json())
    if fmt == "sft":
        cols = {"messages": conv, "tools": conv, "task_id": ds.Value("string"),
                "reward": ds.Value("float64")}  # fmt: skip
    else:
        cols = {"prompt": conv, "chosen": conv, "rejected": conv, "tools": conv,
                "task_id": ds.Value("string"), "chosen_reward": ds.Value("float64"),
                "rejected_reward": ds.Value("float64")}  # fmt: skip
    return ds.Features(cols)


def export_dataset(logs: Sequence[str | Path], fmt: str, out: str | Path, *,
                   min_gap: float = 0.0, decode: Callable[[list[int]], str] | None = None,
                   force: bool = False) -> dict[str, Any]:  # fmt: skip
    """Write the logs' ``fmt`` rows with ``Dataset.save_to_disk(out)``; a manifest back.

    ``decode``: token ids -> text, for logs without loss-mask spans (evaluation logs): the
    tools are read from the decoded prompt."""
    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out = Path(out)
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists (--force replaces it)")
    ds_mod = _datasets()
    episodes = load_logs(logs)
    rows = sft_rows(episodes, decode) if fmt == "sft" else dpo_rows(episodes, min_gap, decode)
    if not rows:
        what = "successful episodes" if fmt == "sft" else "preference pairs"
        raise ValueError(f"no {what} in {len(episodes)} logged episodes: nothing to export")
    features = _features(fmt)
    data = {name: [row[name] for row in rows] for name in features}
    dataset = ds_mod.Dataset.from_dict(data, features=features)
    if out.exists():
        shutil.rmtree(out)
    dataset.save_to_disk(str(out))
    return {"format": fmt, "rows": len(rows), "episodes": len(episodes), "out": str(out),
            "columns": list(features)}  # fmt: skip
