"""How far an LLM judge agrees with the rule-based verifier (pure math, no I/O).

The judge's score is thresholded (``score >= threshold`` = "judged a success") and compared
with the verifier's success on the same episodes: raw agreement (the judge's accuracy with the
verifier as truth), precision and recall of "success", and Cohen's kappa, the agreement beyond
what two raters with these marginals reach by chance: ``(p_o - p_e) / (1 - p_e)``.
"""

from __future__ import annotations

from collections.abc import Sequence


def cohen_kappa(tp: int, fp: int, fn: int, tn: int) -> float:
    """Cohen's kappa of a 2x2 table (judge rows, verifier columns); 1.0 when both raters are
    constant and agree everywhere, 0.0 when chance agreement is total but they differ.

    >>> round(cohen_kappa(tp=20, fp=5, fn=10, tn=15), 4)
    0.4
    """
    n = tp + fp + fn + tn
    if n == 0:
        return 0.0
    p_o = (tp + tn) / n
    p_yes = ((tp + fp) / n) * ((tp + fn) / n)
    p_no = ((fn + tn) / n) * ((fp + tn) / n)
    p_e = p_yes + p_no
    if p_e >= 1.0:
        return 1.0 if p_o >= 1.0 else 0.0
    return (p_o - p_e) / (1.0 - p_e)


def judge_agreement(scores: Sequence[float | None], success: Sequence[bool],
                    threshold: float = 0.5) -> dict[str, float | None]:  # fmt: skip
    """Agreement of thresholded judge ``scores`` with verifier ``success``, episode by episode.

    Episodes the judge could not score (None: a judge fault) are left out and counted in
    ``faults``. Returns ``episodes``, ``faults``, ``tp/fp/fn/tn`` (judge success x verifier
    success), ``agreement`` (= accuracy), ``precision``, ``recall``, ``kappa``, the two success
    rates and the mean judge score on verifier successes and failures. With no episode scored,
    the rates and kappa are None (nothing was measured)."""
    if len(scores) != len(success):
        raise ValueError(f"judge_agreement: {len(scores)} scores for {len(success)} episodes")
    pairs = [(s >= threshold, bool(v), s) for s, v in zip(scores, success, strict=True)
             if s is not None]  # fmt: skip
    tp = sum(j and v for j, v, _ in pairs)
    fp = sum(j and not v for j, v, _ in pairs)
    fn = sum(v and not j for j, v, _ in pairs)
    tn = sum(not j and not v for j, v, _ in pairs)
    n = len(pairs)
    if n == 0:
        empty = ("agreement", "precision", "recall", "kappa", "judge_success_rate",
                 "verifier_success_rate", "score_on_success", "score_on_failure")  # fmt: skip
        return {"episodes": 0.0, "faults": float(len(scores)), "tp": 0.0, "fp": 0.0,
                "fn": 0.0, "tn": 0.0, **dict.fromkeys(empty)}  # fmt: skip

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    return {
        "episodes": float(n),
        "faults": float(len(scores) - n),
        "tp": float(tp), "fp": float(fp), "fn": float(fn), "tn": float(tn),
        "agreement": (tp + tn) / n,
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / (tp + fn) if tp + fn else 0.0,
        "kappa": cohen_kappa(tp, fp, fn, tn),
        "judge_success_rate": (tp + fp) / n,
        "verifier_success_rate": (tp + fn) / n,
        "score_on_success": mean([s for _, v, s in pairs if v]),
        "score_on_failure": mean([s for _, v, s in pairs if not v]),
    }  # fmt: skip
