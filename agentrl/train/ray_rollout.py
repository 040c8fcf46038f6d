"""Rollout in Ray actors (``rollout.backend: ray``): environments and generation in
``rollout.workers`` worker processes, the trainer as the driver.

Each actor holds a copy of the policy (sent once, when it starts) and its own environments;
a job's weights are put in Ray's object store once and loaded by every actor before it plays
its share of the step's task instances (whole groups, in spec order; episode i keeps the
sampling seed ``job.seed + i``, as in one process). Tools keep their ToolGuard behaviour: the
actor builds its envs with the run's ``tools`` settings, so worker-mode tools run in the
actor's own worker processes.

A worker that dies mid-step (its process killed, out of memory) is replaced by a fresh actor
and its share is played again from the same seeds; if the replacement dies too, those
episodes become harness faults (masked from the loss and the group baselines, never scored as
failures). ``rollout/worker_restarts`` counts replacements.

``rollout.ray_address``: None starts a local Ray cluster in this process (its workers see this
process's ``sys.path``); ``auto`` or ``ray://host:port`` joins a running one (``ray start
--head`` on the head node, ``ray start --address=HEAD:6379`` on the others; every node needs
agentrl, the model and the env plugins installed).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from agentrl.chat.render import encode_prompt
from agentrl.rollout import EpisodeSpec, play_specs
from agentrl.train.weights import frozen_copy, load_weights
from agentrl.types import RewardBreakdown, Trajectory


def ray_module() -> Any:
    """``ray``, or a clear error naming the extra that installs it."""
    try:
        import ray
    except ImportError as err:
        raise ImportError("rollout.backend=ray needs Ray: pip install 'agentrl[ray]'") from err
    return ray


class RolloutWorker:
    """A Ray actor's body: a policy copy, an engine over it, the run's envs."""

    def __init__(self, engine: Any, cfg: Any, threads: int) -> None:
        import torch

        from agentrl.train.build import env_factory

        torch.set_num_threads(max(1, threads))
        self.engine, self.cfg = engine, cfg
        self.make_env = env_factory(cfg)

    def pid(self) -> int:
        return os.getpid()

    def play(self, specs: list[EpisodeSpec], temperature: float, seed: int,
             weights: Any) -> list[Trajectory]:  # fmt: skip
        """Load ``weights`` and play ``specs`` (sampling seeds from ``seed``)."""
        load_weights(self.engine.model, weights)
        return play_specs(self.engine, self.make_env, specs, self.cfg.rollout, temperature,
                          seed=seed)  # fmt: skip


def share_by_group(specs: list[EpisodeSpec], workers: int) -> list[tuple[int, int]]:
    """``[start, end)`` index ranges of ``specs``, one per worker (some may be empty), whole
    groups each, in order, as even as the groups allow."""
    bounds = [0] + [i for i in range(1, len(specs))
                    if specs[i].group_id != specs[i - 1].group_id] + [len(specs)]  # fmt: skip
    groups = len(bounds) - 1
    out, g = [], 0
    for w in range(workers):
        take = groups // workers + (1 if w < groups % workers else 0)
        out.append((bounds[g], bounds[g + take]))
        g += take
    return out


def fault_trajectory(make_env, tokenizer, spec: EpisodeSpec, reason: str) -> Trajectory:
    """An episode its worker could not play: the prompt alone, a harness fault."""
    env = make_env() if spec.env_id is None else make_env(spec.env_id)
    messages, info = env.reset(seed=spec.seed, options={"level": spec.level})
    ids = encode_prompt(tokenizer, messages, env.tool_schemas)
    return Trajectory(str(info.get("task_id", spec.seed)), spec.group_id, list(messages), ids,
                      [0] * len(ids), [0.0] * len(ids), [-1] * len(ids), RewardBreakdown(),
                      "harness_error", level=spec.level,
                      info={"harness_error": reason, "seed": spec.seed, "turns": 0,
                            "parse_errors": []})  # fmt: skip


def _raise_if_it_cannot_start(w: int, err: Exception) -> None:
    """An actor whose ``__init__`` raised is a bug or a bad setting, not a crash: say so."""
    if getattr(err, "actor_init_failed", False):
        raise RuntimeError(f"rollout worker {w} could not start: {err}") from err


class RayRolloutPool:
    """``rollout.workers`` Ray actors that play jobs (``play``), replaced when they die."""

    def __init__(self, generator: Any, policy: Any, cfg: Any, make_env) -> None:
        ray = ray_module()
        ro = cfg.rollout
        if not ray.is_initialized():
            env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            ray.init(address=ro.ray_address, include_dashboard=False, log_to_driver=False,
                     runtime_env=None if ro.ray_address else {"env_vars": env})  # fmt: skip
        self.ray, self.cfg, self.make_env = ray, cfg, make_env
        self.tokenizer = generator.tokenizer
        # sent once, copied by each actor
        self.engine_ref = ray.put(generator.fork(frozen_copy(policy)))
        self.actor_cls = ray.remote(num_cpus=ro.worker_cpus)(RolloutWorker)
        self.actors = [self._start() for _ in range(ro.workers)]
        self.restarts = 0

    def _start(self) -> Any:
        return self.actor_cls.remote(self.engine_ref, self.cfg, self.cfg.rollout.worker_cpus)

    def play(self, specs: list[EpisodeSpec], temperature: float, seed: int,
             weights: dict) -> list[Trajectory]:  # fmt: skip
        """Every worker plays its share; a dead worker is replaced and its share replayed
        once, then given up as harness faults."""
        ray = self.ray
        weights_ref = ray.put(weights)
        shares = share_by_group(specs, len(self.actors))
        calls = {w: self._call(w, specs, s, temperature, seed, weights_ref)
                 for w, s in enumerate(shares) if s[1] > s[0]}  # fmt: skip
        out: list[Trajectory] = []
        for w, (a, b) in enumerate(shares):
            if w not in calls:
                continue
            try:
                out += ray.get(calls[w])
            except ray.exceptions.RayActorError as err:
                _raise_if_it_cannot_start(w, err)
                self._replace(w)
                try:
                    out += ray.get(self._call(w, specs, (a, b), temperature, seed, weights_ref))
                except ray.exceptions.RayActorError as err:
                    _raise_if_it_cannot_start(w, err)
                    self._replace(w)
                    reason = f"rollout worker {w} died twice: {type(err).__name__}"
                    out += [fault_trajectory(self.make_env, self.tokenizer, s, reason)
                            for s in specs[a:b]]  # fmt: skip
        return out

    def _call(self, w: int, specs, share: tuple[int, int], temperature: float, seed: int,
              weights_ref) -> Any:  # fmt: skip
        a, b = share
        return self.actors[w].play.remote(specs[a:b], temperature, seed + a, weights_ref)

    def _replace(self, w: int) -> None:
        self.restarts += 1
        self.actors[w] = self._start()

    def pids(self) -> list[int]:
        """The workers' process ids (a test kills one)."""
        return self.ray.get([a.pid.remote() for a in self.actors])

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
