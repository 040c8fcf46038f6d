"""Continuous batching for a server: one decode loop, many concurrent requests.

A ``Batcher`` owns one ``DecodeSession`` and a thread that runs it. Request handlers (any
thread) ``submit`` a prompt and get a ``Job``; the loop adds it to the session (it takes a
slot as soon as one is free), steps every live sequence one token per forward, and finishes
the job when its turn ends (a stop token, its token budget, or one of its stop strings).
Streaming handlers read ``job.partial_text()`` as it grows. A failing forward fails the jobs
in it with the error, not the server. ``use_model`` swaps the decoding model between jobs (a
trainer serving the policy it updates).
"""

from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

from agentrl.engine.session import DecodeSession
from agentrl.policy.generate import Sample


@dataclass(eq=False)
class Job:
    """One sequence to generate; ``done`` is set when ``sample`` (or ``error``) is there."""

    prompt: list[int]
    max_new: int
    sampling: tuple[bool, float, float]  # (greedy, temperature, top_p)
    seed: int
    stop: tuple[str, ...] = ()
    key: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    sample: Sample | None = None
    text: str = ""  # the generated text, the stop token and any stop string cut off
    finish_reason: str = "stop"  # stop | length
    error: str | None = None
    partial: list[int] = field(default_factory=list)
    constraint: Any = None  # the reply's tool-call grammar (agentrl.engine.grammar), if any


class Batcher:
    """Run one decode session in a background thread for concurrent jobs."""

    def __init__(self, engine: Any, *, capacity: int, slots: int, session: Any = None) -> None:
        """``session``: anything with ``DecodeSession``'s add / step / release / partial /
        busy (default: a ``DecodeSession`` over the engine's decoding model)."""
        self.tokenizer = engine.tokenizer
        self.session = session or DecodeSession(engine.decoding_model(), engine.stop_ids,
                                                engine.pad_id, slots=slots,
                                                capacity=capacity)  # fmt: skip
        self.capacity, self.slots = capacity, slots
        self.engine = engine
        self._lock = threading.Lock()  # held by the loop while it touches the session
        self._held: list[Job] = []  # a job taken from the inbox while waiting, not yet added
        self.inbox: queue.Queue[Job] = queue.Queue()
        self.live: dict[int, Job] = {}
        self.keys = itertools.count()
        self.stats = {"jobs": 0, "steps": 0, "max_live": 0}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="agentrl-batcher", daemon=True)
        self.thread.start()

    def submit(self, job: Job) -> Job:
        """Queue ``job``; it decodes alongside every other live job."""
        job.key = next(self.keys)
        self.inbox.put(job)
        return job

    def use_model(self, model: Any) -> None:
        """Decode with ``model`` from now on: a new ``DecodeSession`` when it is not the
        module the session decodes already (updated in place: nothing to do). Only between
        jobs: a live job would mix two models' tokens."""
        with self._lock:
            if getattr(self.session, "model", model) is model:
                return
            if self.live or self._held or not self.inbox.empty():
                raise RuntimeError("use_model: jobs are running; swap models between jobs")
            self.session = DecodeSession(model, self.engine.stop_ids, self.engine.pad_id,
                                         slots=self.slots, capacity=self.capacity)  # fmt: skip

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)

    # -- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.session.busy and not self._held and self.inbox.empty():
                self._wait_for_job()
            with self._lock:
                self._iterate()

    def _wait_for_job(self) -> None:
        try:
            self._held.append(self.inbox.get(timeout=0.05))  # admitted under the lock
        except queue.Empty:
            return

    def _iterate(self) -> None:
        self._admit()
        if not self.session.busy:
            return
        try:
            ended = self.session.step()
        except Exception as err:  # noqa: BLE001 - fail the jobs, keep serving
            self._fail_all(f"decoding failed: {type(err).__name__}: {err}")
            return
        self.stats["steps"] += 1
        for key, sample in ended:
            self._finish(self.live[key], sample)
        self._check_stop_strings()

    def _admit(self) -> None:
        try:
            job = self._held.pop() if self._held else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            self.live[job.key] = job
            self.session.add(job.key, job.prompt, job.max_new, job.seed, sampling=job.sampling,
                             constraint=job.constraint)  # fmt: skip
            self.stats["jobs"] += 1
            try:
                job = self.inbox.get_nowait()
            except queue.Empty:
                break
        self.stats["max_live"] = max(self.stats["max_live"], len(self.live))

    def _finish(self, job: Job, sample: Sample, cut: int | None = None) -> None:
        ids = sample.ids[:-1] if sample.stopped else sample.ids
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        job.sample, job.text = sample, text if cut is None else text[:cut]
        job.finish_reason = "stop" if sample.stopped or cut is not None else "length"
        self.session.release(job.key)
        self.live.pop(job.key, None)
        job.done.set()

    def _check_stop_strings(self) -> None:
        """Publish partial ids; end a job whose text reached one of its stop strings."""
        for job in list(self.live.values()):
            job.partial = self.session.partial(job.key)
            if not job.stop or not job.partial:
                continue
            text = self.tokenizer.decode(job.partial, skip_special_tokens=False)
            hits = [text.find(s) for s in job.stop if s in text]
            if hits:
                lps = getattr(self.session, "partial_logprobs", None)
                lps = lps(job.key) if lps is not None else [0.0] * len(job.partial)
                self._finish(job, Sample(job.partial, lps, False), cut=min(hits))

    def _fail_all(self, message: str) -> None:
        for job in list(self.live.values()):
            job.error = message
            self.session.release(job.key)
            job.done.set()
        self.live.clear()


def partial_text(tokenizer: Any, job: Job) -> str:
    """The text a running job has produced so far (all of it once it is done)."""
    if job.done.is_set():
        return job.text
    return tokenizer.decode(list(job.partial), skip_special_tokens=False)
