"""Asynchronous rollout (``rollout.max_staleness`` = s > 0): a worker thread plays the next
steps' episodes with a copy of the policy while the trainer updates it; with
``rollout.backend: ray`` the thread hands each job to Ray actors (``agentrl.train.ray_rollout``;
s = 0 then plays each step's episodes there synchronously).

The schedule is fixed, so an asynchronous run is reproducible and resumes exactly: before step
k trains, the jobs of steps up to k + s are submitted, each carrying a copy of the weights at
that moment. The job of step j is therefore played by the weights after max(0, j - s) updates
(staleness min(j, s)), whatever the timing. Its task instances, temperature and sampling seed
are drawn in the trainer's thread when it is submitted; the worker only plays them, and
weights are loaded into its copy when a job starts (the push after each update). Where the
env steps run inline (the default) the worker's episodes are a function of the job alone.

Jobs not yet trained on (the in-flight episodes) are part of every checkpoint (``RolloutJob
.state``: the task instances, temperature, seed and the weights they are played with) and are
played again on resume. The trainer corrects stale samples with truncated importance weights
(``agentrl.algos.offpolicy``).

What overlaps on a CPU: the trainer's forward and backward passes with whatever the rollout
waits on (tool calls, an env's I/O). Both threads' tensor work shares the same cores, so
pure decoding gains little; tools that take time gain the most (``bench/async.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.engine.decoder import draw_seed_base
from agentrl.rollout import EpisodeSpec, play_specs
from agentrl.train.ray_rollout import RayRolloutPool
from agentrl.train.weights import frozen_copy, load_weights, trainable_weights
from agentrl.types import Trajectory


class JobCancelled(Exception):
    """A rollout job stopped because the run ended (never scored)."""


@dataclass
class RolloutJob:
    """One step's episodes to play, and the weights that play them."""

    step: int
    specs: list[EpisodeSpec]
    temperature: float
    seed: int  # the base of the episodes' sampling seeds
    version: int  # updates applied to ``weights``
    weights: dict[str, torch.Tensor]  # the policy's trainable parameters, by name (a copy)

    def state(self) -> dict[str, Any]:
        """A checkpointable dict (``from_state`` inverts it)."""
        specs = [(s.seed, s.level, s.group_id, s.env_id) for s in self.specs]
        return {"step": self.step, "specs": specs, "temperature": self.temperature,
                "seed": self.seed, "version": self.version, "weights": self.weights}  # fmt: skip

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> RolloutJob:
        specs = [EpisodeSpec(*s) for s in d["specs"]]
        return cls(d["step"], specs, d["temperature"], d["seed"], d["version"], d["weights"])


@dataclass
class Played:
    """A finished job: its trajectories (spec order) and when and by what it was played."""

    trajs: list[Trajectory]
    version: int  # updates applied to the weights that played it
    play_s: float  # the worker's seconds on it
    wait_s: float  # the trainer's seconds waiting for it
    restarts: int = 0  # Ray workers replaced so far in the run


#: ``draw(step) -> (specs, temperature)``: a step's task instances and rollout temperature,
#: drawn in the trainer's thread (the sampler and the schedules)
Draw = Callable[[int], tuple[list[EpisodeSpec], float]]


class RolloutPipeline:
    """The worker thread, its copy of the policy, and the jobs not yet trained on.

    ``jobs`` is the loop state's list (checkpointed with it); jobs restored into it are played
    again first.
    """

    def __init__(self, policy: Any, generator: Any, make_env, cfg, jobs: list[RolloutJob],
                 start: int) -> None:  # fmt: skip
        self.ro, self.make_env, self.jobs = cfg.rollout, make_env, jobs
        if not hasattr(generator, "fork"):
            raise TypeError(f"rollout.max_staleness > 0 and rollout.backend=ray need a "
                            f"generator with fork(model) (agentrl's Engine); got "
                            f"{type(generator).__name__}")  # fmt: skip
        self.engine, self.ray_pool = None, None
        if self.ro.backend == "ray":
            self.ray_pool = RayRolloutPool(generator, policy, cfg, make_env)
        else:
            self.engine = generator.fork(frozen_copy(policy))
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentrl-rollout")
        self.cancel = threading.Event()
        self.futures: dict[int, Future] = {}
        self.next_step = max((j.step for j in jobs), default=start - 1) + 1
        for job in sorted(jobs, key=lambda j: j.step):
            self.futures[job.step] = self.pool.submit(self._play, job)

    def fill(self, step: int, total: int, policy: Any, draw: Draw) -> None:
        """Submit the jobs of steps up to ``step + max_staleness`` (below ``total``), played by
        the policy's current weights (``step`` updates applied)."""
        last = min(step + self.ro.max_staleness, total - 1)
        while self.next_step <= last:
            j = self.next_step
            specs, temperature = draw(j)
            job = RolloutJob(j, specs, temperature, draw_seed_base(), step,
                             trainable_weights(policy))  # fmt: skip
            self.jobs.append(job)
            self.futures[j] = self.pool.submit(self._play, job)
            self.next_step += 1

    def take(self, step: int) -> Played:
        """Step ``step``'s episodes (waits for them); the job leaves the checkpointed list."""
        t0 = time.time()
        trajs, play_s = self.futures.pop(step).result()
        job = next(j for j in self.jobs if j.step == step)
        self.jobs.remove(job)
        return Played(trajs, job.version, play_s, time.time() - t0, self.worker_restarts)

    def _play(self, job: RolloutJob) -> tuple[list[Trajectory], float]:
        t0, ro = time.time(), self.ro
        torch.set_num_threads(ro.worker_cpus)  # this thread's own; the trainer keeps its own
        if self.cancel.is_set():
            raise JobCancelled(f"step {job.step}")
        if self.ray_pool is not None:
            trajs = self.ray_pool.play(job.specs, job.temperature, job.seed, job.weights)
            return trajs, time.time() - t0
        load_weights(self.engine.model, job.weights)
        trajs = play_specs(self.engine, self.make_env, job.specs, ro, job.temperature,
                           seed=job.seed, on_turn=self._check_cancel)  # fmt: skip
        return trajs, time.time() - t0

    def _check_cancel(self, _done: int, _total: int) -> None:
        if self.cancel.is_set():
            raise JobCancelled("the run ended")

    def close(self) -> None:
        """Stop the worker: queued jobs are dropped, a running one stops at its next finished
        episode (the jobs stay in the checkpointed list)."""
        self.cancel.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
        if self.ray_pool is not None:
            self.ray_pool.close()

    @property
    def worker_restarts(self) -> int:
        """Ray workers replaced so far (0 in one process)."""
        return 0 if self.ray_pool is None else self.ray_pool.restarts
