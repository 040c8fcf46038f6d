"""An LLM judge as a reward layer (seed 003 §2.2): flexible, but noisy and hackable.

``LLMJudge`` asks any OpenAI-compatible endpoint (the ``openai`` client: ``agentrl serve``,
vLLM, a hosted API) to score episodes by ``reward.judge.rubric``; ``apply_judge`` adds the
scores to the episodes' ``RewardBreakdown`` as the ``judge`` layer with ``reward.judge.weight``.

The judge is a harness component, so its failures follow ToolGuard's policy: a per-request
timeout, ``retries`` extra tries with exponential backoff, and a circuit breaker
(``agentrl.tools.breaker``) that refuses requests at once after ``breaker_failures`` failed
ones in a row. A request that still fails (timeout, HTTP error, a reply that is not a score)
is a **judge fault**: the layer is left out of that episode's breakdown (its total is what it
would be with the judge off) and counted in ``reward/judge_faults``; it is never scored 0.

Scores are cached by a hash of (judge model, rubric, mode, the request's text): a second
request for the same transcript is answered from the cache (``cache_path``: a JSONL file that
outlives the run; None: memory only).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentrl.config.judge import JudgeConfig
from agentrl.rewards.judge_prompt import (
    absolute_messages,
    parse_score,
    parse_scores,
    relative_messages,
    task_text,
    transcript,
)
from agentrl.tools.breaker import CircuitBreaker
from agentrl.types import Message, Trajectory

LAYER = "judge"
FAULT_KINDS = ("timeout", "error", "malformed", "circuit_open")


class JudgeCache:
    """Scores by request hash, in memory and (with ``path``) appended to a JSONL file."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.values: dict[str, Any] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    self.values[row["key"]] = row["value"]
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line of a killed run

    @staticmethod
    def key(*parts: Any) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self.values[key] = value
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps({"key": key, "value": value}) + "\n")


class LLMJudge:
    """Scores episodes through an OpenAI-compatible endpoint (``reward.judge``).

    ``http_client``: an ``httpx.Client`` for the ``openai`` client (tests pass a
    ``MockTransport``); ``sleep``: the backoff's sleep (tests pass a no-op)."""

    def __init__(self, cfg: JudgeConfig, *, http_client: Any = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:  # fmt: skip
        try:
            import openai
        except ImportError as err:
            raise ImportError(
                "reward.judge needs the openai client: pip install openai (or agentrl[judge])"
            ) from err

        self.cfg, self._sleep, self._openai = cfg, sleep, openai
        self.client = openai.OpenAI(base_url=cfg.base_url, api_key=cfg.api_key,
                                    timeout=cfg.timeout_s, max_retries=0,
                                    http_client=http_client)  # fmt: skip
        self.breaker = CircuitBreaker(cfg.breaker_failures, cfg.breaker_cooldown_s)
        self.cache = JudgeCache(cfg.cache_path)
        self.counts: Counter[str] = Counter()  # requests, cache_hits, retries, faults by kind
        self._lock = threading.Lock()

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def score(self, messages: Sequence[Message]) -> float | None:
        """One episode's score in [0, 1], or None (a judge fault)."""
        c = self.cfg
        request = absolute_messages(c.rubric, task_text(messages),
                                    transcript(messages, c.max_transcript_chars))  # fmt: skip
        return self._ask(request, parse_score)

    def score_group(self, group: Sequence[Sequence[Message]]) -> list[float] | None:
        """The scores of a group's episodes judged together (relative mode), or None."""
        c = self.cfg
        shown = [transcript(m, c.max_transcript_chars) for m in group]
        request = relative_messages(c.rubric, task_text(group[0]), shown)
        return self._ask(request, lambda text: parse_scores(text, len(group)))

    def _ask(self, request: list[Message], parse: Callable[[str], Any]) -> Any:
        c = self.cfg
        key = JudgeCache.key(c.model, c.rubric, c.mode, request)
        cached = self.cache.get(key)
        if cached is not None:
            self._count("cache_hits")
            return cached
        kind = "error"
        for attempt in range(c.retries + 1):
            if attempt:
                self._count("retries")
                self._sleep(c.backoff_s * 2 ** (attempt - 1))
            if not self.breaker.allow():
                kind = "circuit_open"
                break
            value, kind = self._request(request, parse)
            self.breaker.record(value is not None)
            if value is not None:
                self.cache.put(key, value)
                return value
        self._count(f"fault_{kind}")
        return None

    def _request(self, request: list[Message], parse: Callable[[str], Any]) -> tuple[Any, str]:
        """(parsed value or None, what went wrong)."""
        self._count("requests")
        try:
            reply = self.client.chat.completions.create(
                model=self.cfg.model, messages=request, temperature=0.0,
                max_tokens=self.cfg.max_tokens,
            )  # fmt: skip
            text = reply.choices[0].message.content or ""
        except self._openai.APITimeoutError:
            return None, "timeout"
        except (self._openai.OpenAIError, ValueError, IndexError, AttributeError):
            return None, "error"
        value = parse(text)
        return value, "ok" if value is not None else "malformed"

    def close(self) -> None:
        self.client.close()


def _groups(trajs: Sequence[Trajectory]) -> list[list[Trajectory]]:
    by_id: dict[int, list[Trajectory]] = {}
    for t in trajs:
        by_id.setdefault(t.group_id, []).append(t)
    return list(by_id.values())


def apply_judge(judge: LLMJudge, episodes: Sequence[Trajectory]) -> dict[str, float]:
    """Score ``episodes`` and add the ``judge`` layer to each one scored (in place).

    Harness faults are not judged (they are out of the loss anyway). Returns the step's
    metrics: ``reward/judge_faults`` (episodes left without the layer), ``judge/judged``,
    ``judge/score_mean``, ``judge/requests``, ``judge/cache_hits``, ``judge/retries``,
    ``judge/<fault kind>`` and ``time/judge_s``."""
    t0, before = time.perf_counter(), Counter(judge.counts)
    todo = [t for t in episodes if not t.is_harness_fault]
    with ThreadPoolExecutor(judge.cfg.concurrency) as pool:
        if judge.cfg.mode == "absolute":
            scores = list(pool.map(lambda t: judge.score(t.messages), todo))
            pairs = list(zip(todo, scores, strict=True))
        else:
            groups = _groups(todo)
            got = list(pool.map(lambda g: judge.score_group([t.messages for t in g]), groups))
            pairs = [(t, None if s is None else s[i])
                     for g, s in zip(groups, got, strict=True)
                     for i, t in enumerate(g)]  # fmt: skip
    judged = [s for t, s in pairs if s is not None]
    for t, s in pairs:
        if s is not None:
            t.reward.layers[LAYER] = float(s)
            t.reward.weights[LAYER] = judge.cfg.weight
    delta = judge.counts - before
    m = {"reward/judge_faults": float(len(pairs) - len(judged)),
         "judge/judged": float(len(judged)),
         "judge/score_mean": sum(judged) / len(judged) if judged else 0.0,
         "time/judge_s": time.perf_counter() - t0}  # fmt: skip
    for k in ("requests", "cache_hits", "retries"):
        m[f"judge/{k}"] = float(delta.get(k, 0))
    for kind in FAULT_KINDS:
        m[f"judge/{kind}"] = float(delta.get(f"fault_{kind}", 0))
    return m


def make_judge(cfg: JudgeConfig) -> LLMJudge | None:
    """The run's judge (``reward.judge``), or None when it is off."""
    return LLMJudge(cfg) if cfg.enabled else None
