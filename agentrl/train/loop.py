"""The one training loop: warm start -> evaluate -> (rollout -> reward -> advantage -> update
-> log) x steps -> evaluate -> save. Reads top to bottom; each line calls one component."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from agentrl.config import Config
from agentrl.eval.runner import family_line
from agentrl.machine import memory_metrics, release_free_memory
from agentrl.monitor.sinks import check_installed
from agentrl.monitor.status import crash_record, write_status
from agentrl.policy.loading import save_policy
from agentrl.policy.lora import merge_and_save
from agentrl.policy.roles import save_role_adapters, uses_role_adapters
from agentrl.precision import autocast_dtype
from agentrl.train.agent import AgentCollector, AgentProgram
from agentrl.train.build import (
    RLModels,
    build_optimizer,
    build_rl_models,
    env_factory,
    load_generator,
    make_kl_controller,
    seed_everything,
    warm_start,
)
from agentrl.train.extras import attach_extras, feedback_endpoint
from agentrl.train.pipeline import RolloutPipeline
from agentrl.train.run import Run, progress_bar
from agentrl.train.sampler import make_sampler
from agentrl.train.state import new_state
from agentrl.train.step import draw_for, rl_step


def train(
    cfg: Config,
    *,
    progress: bool = True,
    console: Console | None = None,
    resume: bool = False,
    on_step: Callable[[int], None] | None = None,
    agent: AgentProgram | None = None,
) -> dict[str, Any]:
    """Warm-start, evaluate, train with GRPO or PPO, evaluate again; returns the run summary.

    ``agent``: play the episodes by running this program against the trainer's own server
    (``agentrl.train.agent``) instead of agentrl's rollout; evaluations stay agentrl's own.

    ``resume``: continue ``cfg.train.run_dir`` from its newest complete checkpoint (no warm
    start, no first evaluation: both happened before RL began). ``on_step(n)`` is called after
    each step (and its checkpoint) with the number of completed steps.
    """
    console = console or Console(stderr=True)
    run = Run(cfg, console, resume=resume)
    write_status(run.dir, "running")
    try:
        summary = _train_run(run, cfg, progress, on_step, agent)
    except BaseException as err:  # recorded for agentrl doctor, then raised as it was
        write_status(run.dir, "crashed", **crash_record(err))
        raise
    write_status(run.dir, "stopped" if run.interrupted else "finished",
                 stopped_by=run.stopped_by)  # fmt: skip
    return summary


def _train_run(
    run: Run,
    cfg: Config,
    progress: bool,
    on_step: Callable[[int], None] | None,
    agent: AgentProgram | None = None,
) -> dict[str, Any]:
    console = run.console
    if agent is not None and cfg.rollout.pipelined:
        raise ValueError("rollout.max_staleness > 0 and rollout.backend=ray play episodes in "
                         "agentrl's own rollout; an --agent program plays them through the "
                         "trainer's server: set rollout.max_staleness=0, "
                         "rollout.backend=local")  # fmt: skip
    if agent is not None and cfg.rollout.mode == "hierarchical":
        raise ValueError("rollout.mode=hierarchical plays manager and worker contexts in "
                         "agentrl's own rollout; an --agent program plays its own loop: set "
                         "rollout.mode=react")  # fmt: skip
    if agent is not None and cfg.rollout.memory.enabled:
        raise ValueError("rollout.memory shapes agentrl's own rollout; an --agent program "
                         "keeps its own history (a rewrite is recorded as a new segment): "
                         "set rollout.memory.enabled=false")  # fmt: skip
    make_env = env_factory(cfg)  # a bad env or a missing extra fails here, before model work
    check_installed(cfg)  # so does a metric sink whose package is missing
    seed_everything(cfg.train.seed)
    model, tok, generator, device = load_generator(cfg)
    run.decode = lambda ids: tok.decode(ids, skip_special_tokens=False)  # the viewer's mask
    evals = cfg.train.eval_episodes > 0
    before: dict[str, Any] = {}
    collector = None
    if agent is not None:
        collector = AgentCollector(agent, generator, make_env, cfg.rollout,
                                   run.dir / "agent_records", log=console.print)  # fmt: skip
    with _closing(collector):
        if run.fresh:
            warm_start(cfg, model, tok, make_env, console, progress)
            release_free_memory()  # the SFT's freed tensors back to the system
        # the reference (and a LoRA run's frozen base): saved by a fresh run before its
        # evaluation, so a stopped evaluation keeps them; loaded back by a resumed run
        run.start_weights(model, device)
        if run.fresh and evals:
            before = _evaluate(run, generator, make_env, "before", 0, collector)
        return _rl_run(run, cfg, progress, on_step, model, tok, generator, device, make_env,
                       before, collector)  # fmt: skip


def _rl_run(run: Run, cfg: Config, progress: bool, on_step: Callable[[int], None] | None,
            model, tok, generator, device: str, make_env, before: dict[str, Any],
            collector: AgentCollector | None) -> dict[str, Any]:  # fmt: skip
    """From the warm-started model: the RL steps, the evaluations, the saved model."""
    console = run.console
    evals = cfg.train.eval_episodes > 0
    rl = build_rl_models(model, cfg)
    generator.model = rl.policy
    optimizer = build_optimizer(rl, cfg)
    state = new_state(cfg, make_kl_controller(cfg), make_sampler)
    state.eval_before = before
    attach_extras(state, cfg, run.dir, tok)  # the LLM judge, the human-feedback book
    start = run.restore(rl, optimizer, state)
    amp = autocast_dtype(cfg.train.autocast, device)
    steps, every = cfg.train.steps, cfg.train.eval_every
    after: dict[str, Any] = {}
    pipeline = None  # a worker thread (and Ray actors) playing the next steps' episodes
    if cfg.rollout.pipelined and start < steps:
        pipeline = RolloutPipeline(rl.policy, generator, make_env, cfg, state.rollout_jobs,
                                   start)  # fmt: skip
    with (run.recording(rl, optimizer, state), _closing(pipeline),
          feedback_endpoint(cfg, state, run.dir, console.print)):  # fmt: skip
        with progress_bar(console, progress) as bar:
            task = bar.add_task(cfg.algo.name.upper(), total=steps, completed=start, info="")
            for step in range(start, steps):
                played = None
                if pipeline is not None:
                    pipeline.fill(step, steps, rl.policy, draw_for(cfg, state))
                    played = pipeline.take(step)
                res = rl_step(cfg, step, rl, optimizer, state, generator, make_env,
                              tok.pad_token_id, amp, collector, played)  # fmt: skip
                for event in res.events:
                    console.print(f"curriculum: {event}")
                release_free_memory()  # else a long run's heap grows to the machine's limit
                res.metrics.update(memory_metrics())  # resident after the release, and peak
                run.log_step(step, res.metrics, res.trajs)
                if every and (step + 1) % every == 0 and step + 1 < steps:
                    _evaluate(run, generator, make_env, "during", step + 1, collector)
                run.end_step(step + 1, res.stepped)
                m = res.metrics
                info = (f"success {m['rollout/success_rate']:.2f} reward {m['reward/total']:.2f} "
                        f"kl {m.get('loss/kl', 0.0):.4f}")  # fmt: skip
                bar.update(task, advance=1, info=info)
                if progress and not console.is_terminal:  # a log file: one plain line a step
                    console.print(f"{cfg.algo.name.upper()} step {step + 1}/{steps}: {info}, "
                                  f"{m.get('time/step_s', 0.0):.0f} s "
                                  f"(rollout {m.get('time/rollout_s', 0.0):.0f} s)")  # fmt: skip
                if on_step is not None:
                    on_step(step + 1)
                if run.stop_requested(step + 1):
                    break
        if evals and not run.interrupted:
            after = state.eval_before  # no step trained: the same weights, seeds, decoding
            if steps > 0 or not after:
                after = _evaluate(run, generator, make_env, "after", steps, collector)
    if cfg.train.save_model and not run.interrupted:
        save_final(rl, tok, cfg, run.dir)
    return run.summary(state.eval_before, after)


@contextmanager
def _closing(worker: AgentCollector | RolloutPipeline | None) -> Iterator[None]:
    """Stop the agent server or the rollout worker (if any) when training ends, however it
    ends."""
    try:
        yield
    finally:
        if worker is not None:
            worker.close()


def _evaluate(run: Run, generator, make_env, when: str, step: int,
              program: AgentCollector | None = None) -> dict[str, Any]:  # fmt: skip
    episodes = run.cfg.train.eval_episodes
    if when != "during":
        run.console.print(f"evaluating {when} RL on {episodes} held-out episodes")
    point = run.evaluate(generator, make_env, when, step, program)
    release_free_memory()
    label = f"step {step}: held-out success" if when == "during" else f"success {when} RL:"
    run.console.print(f"{label} {point['success_rate']:.3f} {point['success_by_level']}")
    if families := family_line(point):
        run.console.print(f"  {families}")
    if "program" in point:
        p = point["program"]
        run.console.print(
            f"{label.rstrip(':')} through the program: {p['success_rate']:.3f} "
            f"{p['success_by_level']} ({p['harness_faults']} harness faults)"
        )
    if "general" in point:
        run.console.print(f"general capability {when} RL: {point['general']['accuracy']:.3f} "
                          f"{point['general']['by_kind']}")  # fmt: skip
    return point


def save_final(rl: RLModels, tok, cfg: Config, run_dir: Path) -> None:
    """The trained model in run_dir/model (LoRA: adapter in run_dir/adapter, merged model in
    run_dir/model unless lora.merge_on_save is off; role adapters: both in run_dir/adapter,
    the base in run_dir/model); a PPO critic in run_dir/critic.pt."""
    if rl.lora and uses_role_adapters(rl.policy):
        save_role_adapters(rl.policy, tok, run_dir / "model", run_dir / "adapter")
    elif rl.lora:
        if cfg.lora.merge_on_save:
            merge_and_save(rl.policy, tok, run_dir / "model", run_dir / "adapter")
        else:
            rl.policy.save_pretrained(str(run_dir / "adapter"))
    else:
        save_policy(rl.policy, tok, run_dir / "model")
    if rl.critic is not None:
        torch.save(rl.critic.state_dict(), run_dir / "critic.pt")
