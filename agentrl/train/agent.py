"""Train an agent program unchanged: ``agentrl train CONFIG --agent "python my_agent.py"``.

The trainer serves the policy it trains from its own OpenAI-compatible server (in-process, on a
free loopback port, ``agentrl.serve``) with a ``Recorder`` writing to ``RUN_DIR/agent_records``.
Each episode runs the program once, with in its environment:

- ``OPENAI_BASE_URL`` (``http://127.0.0.1:PORT/v1``), ``OPENAI_API_KEY`` (a per-run key the
  server requires), ``AGENTRL_MODEL`` / ``OPENAI_MODEL`` (the served name; any name is served);
- ``AGENTRL_SESSION``: the episode's session id, to send as the ``X-Agentrl-Session`` header
  (or the ``user`` field), and to report the reward with (``POST /v1/agentrl/reward``,
  ``agentrl.serve.client.report_reward``);
- ``AGENTRL_TASK``: the task instance as JSON: ``env``, ``seed``, ``level``, ``task_id``,
  ``group``, ``messages`` (the env's opening messages) and ``tools`` (its tool schemas).

``group_size`` episodes share a task instance (a GRPO group). The recorded session becomes the
episode's token-exact trajectory (``agentrl.serve.episodes``: a rewritten history makes
segments) and the step trains it on the same path as any rollout (``rl_step``). The server
decodes with the rollout temperature and turn budget of the step, whatever the program asks
for, so the recorded log-probs are the ones the update uses. A program that exits non-zero,
times out or reports no reward is a harness fault: masked, never scored, logged with the tail
of its stderr. After each update the server decodes the updated weights (the policy is updated
in place; a lower-precision decoding copy is refreshed before the next step's episodes).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.chat.render import encode_prompt
from agentrl.rollout import EpisodeSpec
from agentrl.types import Trajectory

STDERR_TAIL = 2000  # characters of a failed program's stderr kept in the log and the record


@dataclass(frozen=True)
class AgentProgram:
    """The program to train: a command line run once per episode."""

    command: str
    timeout_s: float = 300.0  # one episode's wall-clock limit (past it: a harness fault)
    parallel: int = 8  # episodes (program processes) run at once; their requests batch

    def __post_init__(self) -> None:
        self.argv()  # an empty or badly quoted command fails here, with shlex's message

    def argv(self) -> list[str]:
        try:
            args = shlex.split(self.command)
        except ValueError as err:
            raise ValueError(f"--agent: cannot split {self.command!r}: {err}") from err
        if not args:
            raise ValueError("--agent: the command is empty")
        return args


@dataclass
class _Run:
    rc: int | None  # None: timed out
    stderr: str
    seconds: float


class AgentCollector:
    """``collect(specs, temperature) -> (trajectories, metrics)`` by running the program.

    Holds the in-process server (started on first use, ``close()`` stops it).
    """

    def __init__(self, program: AgentProgram, generator: Any, make_env: Callable[..., Any],
                 rollout: Any, record_dir: Path,
                 log: Callable[[str], None] = print) -> None:  # fmt: skip
        self.program, self.generator, self.make_env = program, generator, make_env
        self.ro, self.record_dir, self.log = rollout, Path(record_dir), log
        self.key, self.run_tag = f"agentrl-{secrets.token_hex(12)}", secrets.token_hex(4)
        self.app: Any = None
        self.url = ""
        self.step = 0
        self._server: Any = None

    # -- the server ------------------------------------------------------------------------
    def start(self) -> None:
        """Serve the policy on a free loopback port (idempotent)."""
        if self.app is not None:
            return
        from agentrl.serve.app import create_app
        from agentrl.serve.background import BackgroundServer
        from agentrl.serve.record import Recorder

        recorder = Recorder(self.generator.tokenizer, self.record_dir, keep=True)
        recorder.max_new = self.ro.max_new_tokens
        slots = max(1, min(self.program.parallel, 64))
        self.app = create_app(self.generator, "policy", capacity=self.ro.max_total_tokens,
                              slots=slots, api_key=self.key, recorder=recorder,
                              any_model=True)  # fmt: skip
        self._server = BackgroundServer(self.app, name="agentrl-agent-server", lifespan="on")
        self.url = self._server.start() + "/v1"
        self.log(f"agent: serving the policy at {self.url} for {self.program.command!r}")

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
        self._server = self.app = None

    # -- a step's episodes -----------------------------------------------------------------
    def __call__(self, specs: list[EpisodeSpec], temperature: float) -> tuple[list[Trajectory],
                                                                               dict]:  # fmt: skip
        """Run the program once per spec (sampling at ``temperature``); episodes in order."""
        return self.play(specs, (False, temperature, self.ro.top_p))

    def play(self, specs: list[EpisodeSpec],
             sampling: tuple[bool, float, float]) -> tuple[list[Trajectory], dict]:  # fmt: skip
        """Episodes of ``specs`` with the server decoding at ``sampling`` (greedy, temperature,
        top_p), and the step's ``agent/`` metrics."""
        self.start()
        batcher, recorder = self.app.state.batcher, self.app.state.recorder
        batcher.use_model(self.generator.decoding_model())  # the weights after the last update
        recorder.sampling, recorder.version = sampling, self.step
        self.step += 1
        t0 = time.time()
        tasks = [self._task(spec) for spec in specs]
        with ThreadPoolExecutor(max(1, self.program.parallel)) as pool:
            runs = list(pool.map(self._run, tasks))
        trajs = [self._trajectory(task, run) for task, run in zip(tasks, runs, strict=True)]
        orphans = recorder.drop_kept()  # requests outside every episode's session
        faults = [t for t in trajs if t.is_harness_fault]
        n = max(len(trajs), 1)
        metrics = {
            "agent/harness_faults": len(faults),
            "agent/segments_per_episode": sum(t.info.get("segments", 0) for t in trajs) / n,
            "agent/requests_per_episode": sum(t.info.get("requests", 0) for t in trajs) / n,
            "agent/continued_fraction": sum(t.info.get("continued", 0) for t in trajs)
            / max(sum(max(t.info.get("requests", 0) - 1, 0) for t in trajs), 1),
            "agent/program_s": sum(r.seconds for r in runs) / n,
            "agent/wall_s": time.time() - t0,
            "agent/orphan_requests": orphans,
        }
        return trajs, metrics

    def _task(self, spec: EpisodeSpec) -> dict[str, Any]:
        env = self.make_env(spec.env_id) if spec.env_id else self.make_env()
        messages, info = env.reset(seed=spec.seed, options={"level": spec.level})
        session = f"{self.run_tag}-{self.step}-{secrets.token_hex(6)}"
        return {
            "env": spec.env_id or getattr(getattr(env, "family", None), "name", None),
            "seed": spec.seed, "level": spec.level, "group": spec.group_id,
            "task_id": str(info.get("task_id", spec.seed)), "messages": messages,
            "tools": env.tool_schemas, "session": session, "env_id": spec.env_id,
        }  # fmt: skip

    def _run(self, task: dict[str, Any]) -> _Run:
        public = {k: task[k] for k in ("env", "seed", "level", "task_id", "group", "messages",
                                       "tools")}  # fmt: skip
        env = {**os.environ, "OPENAI_BASE_URL": self.url, "OPENAI_API_KEY": self.key,
               "AGENTRL_MODEL": "policy", "OPENAI_MODEL": "policy",
               "AGENTRL_SESSION": task["session"], "AGENTRL_TASK": json.dumps(public)}  # fmt: skip
        t0 = time.time()
        try:
            done = subprocess.run(self.program.argv(), env=env, capture_output=True, text=True,
                                  timeout=self.program.timeout_s, check=False)  # fmt: skip
            return _Run(done.returncode, done.stderr or "", time.time() - t0)
        except subprocess.TimeoutExpired as err:
            tail = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else ""
            return _Run(None, tail, time.time() - t0)
        except OSError as err:  # the command cannot start at all
            return _Run(127, f"{type(err).__name__}: {err}", time.time() - t0)

    def _trajectory(self, task: dict[str, Any], run: _Run) -> Trajectory:
        from agentrl.serve.episodes import session_trajectory

        records, reward = self.app.state.recorder.take(task["session"])
        info = {"env_id": task["env_id"], "seed": task["seed"], "session": task["session"],
                "agent_rc": run.rc, "agent_s": round(run.seconds, 3)}  # fmt: skip
        traj = session_trajectory(records, reward, task_id=task["task_id"],
                                  group_id=task["group"], level=task["level"],
                                  info=info)  # fmt: skip
        fault = None
        if run.rc is None:
            fault = f"the program ran past {self.program.timeout_s:g} s"
        elif run.rc != 0:
            fault = f"the program exited with status {run.rc}"
        elif traj.is_harness_fault:
            fault = traj.info["harness_error"]
        if fault is None:
            return traj
        tail = run.stderr[-STDERR_TAIL:].strip()
        traj.termination = "harness_error"
        traj.info.update(harness_error=fault, stderr_tail=tail)
        self.log(f"agent: harness fault in session {task['session']} (task {task['task_id']}): "
                 f"{fault}" + (f"; stderr tail:\n{tail}" if tail else ""))  # fmt: skip
        if not traj.token_ids:  # no request made: a row of its prompt, nothing trained
            ids = encode_prompt(self.generator.tokenizer, task["messages"], task["tools"])
            traj.token_ids, traj.loss_mask = ids, [0] * len(ids)
            traj.logprobs, traj.turn_of_token = [0.0] * len(ids), [-1] * len(ids)
            traj.messages = list(task["messages"])
        return traj
