"""Live feedback in a real tiny-model run: a scripted rater that prefers shorter answers rates
each step's episodes as they are logged (feedback files, by ``episode_id``); the rated groups
are replayed in the next updates. Against the same run without feedback (same seeds), the
final policy gives the episodes the rater liked more log-probability than those it disliked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from runhelpers import tiny_run_overrides

from agentrl.config import build_config
from agentrl.train import train
from agentrl.train.feedback import write_feedback


def generated(record: dict) -> tuple[str, str]:
    """(the prompt's text, the first assistant turn's text) of a logged episode."""
    spans = record["spans"]
    first = next(i for i, s in enumerate(spans) if s["mask"] == 1)
    return "".join(s["text"] for s in spans[:first]), spans[first]["text"]


def shorter_is_better(run: Path, step: int, rated: list) -> None:
    """The scripted rater: in each group of step ``step``, +1 for the answers shorter than the
    group's median length in characters, -1 for the longer ones."""
    records = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    groups: dict[int, list[dict]] = {}
    for r in records:
        if r["step"] == step:
            groups.setdefault(r["group_id"], []).append(r)
    for group in groups.values():
        lengths = sorted(len(generated(r)[1]) for r in group)
        median = (lengths[(len(lengths) - 1) // 2] + lengths[len(lengths) // 2]) / 2
        for r in group:
            n = len(generated(r)[1])
            if n != median:
                rating = 1.0 if n < median else -1.0
                write_feedback(run, r["episode_id"], rating=rating)
                rated.append((*generated(r), rating))


def feedback_run(model_dir: Path, run: Path, feedback: bool, steps: int = 4) -> list:
    overrides = [*tiny_run_overrides(model_dir, run), "rollout.group_size=4",
                 "rollout.groups_per_step=2", f"train.steps={steps}", "task.max_turns=1",
                 "rollout.max_new_tokens=12", "rollout.max_total_tokens=600",
                 "train.checkpoint_every=0", "train.general_check=false",
                 f"train.feedback.enabled={str(feedback).lower()}"]  # fmt: skip
    rated: list = []
    on_step = (lambda n: shorter_is_better(run, n - 1, rated)) if feedback else None
    train(build_config({}, overrides), progress=False, on_step=on_step)
    return rated


def text_logprob(model, tok, prompt: str, text: str) -> float:
    from agentrl.chat.render import tokenize

    p, g = tokenize(tok, prompt), tokenize(tok, text)
    ids = torch.tensor([p + g])  # (1, P + G)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, len(p) - 1 : -1], -1)  # (G, V)
    return float(logp.gather(-1, torch.tensor(g)[:, None]).sum())


@pytest.mark.timeout(1800)  # two runs (~11 s idle), and the tiny fixture's build on a busy machine
def test_ratings_move_the_policy_toward_the_rated_behaviour(tiny_dir, tmp_path):
    from agentrl.policy.loading import load_policy

    rated = feedback_run(tiny_dir, tmp_path / "fb", True)
    feedback_run(tiny_dir, tmp_path / "plain", False)
    metrics = [json.loads(x) for x in (tmp_path / "fb" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["feedback/applied"] == 0  # nothing rated before step 0
    applied = sum(m["feedback/applied"] for m in metrics)
    assert applied >= 6 and sum(m["feedback/replayed_episodes"] for m in metrics) >= 8
    assert all(m["feedback/dropped"] == 0 for m in metrics)
    with_fb, tok = load_policy(str(tmp_path / "fb" / "model"))
    without, _ = load_policy(str(tmp_path / "plain" / "model"))
    shift = {1.0: [], -1.0: []}  # log-prob gained by feedback, by rating
    for prompt, text, rating in rated:
        shift[rating].append(text_logprob(with_fb, tok, prompt, text)
                             - text_logprob(without, tok, prompt, text))  # fmt: skip
    liked = sum(shift[1.0]) / len(shift[1.0])
    disliked = sum(shift[-1.0]) / len(shift[-1.0])
    print(f"log-prob shift by feedback: liked {liked:+.3f}, disliked {disliked:+.3f} "
          f"({len(shift[1.0])} / {len(shift[-1.0])} episodes)")  # fmt: skip
    assert liked - disliked > 0.5
