"""Hierarchical memory vs full history on a long episode: prompt tokens, seconds and peak
memory per turn at 5, 10, 20 and 30 turns, in one run.

Run from the repository root::

    python bench/memory.py --json memory.json                       # tiny model
    python bench/memory.py --model agentrl/smollm2-135m --json memory_smollm2.json

A scripted policy chooses the calls (``get_weather`` over 30 cities on the weather task,
``max_turns`` 30) so both modes play the same episode; the model really decodes every turn:
each turn the engine prefills the context's new tokens and decodes as many tokens as the
scripted call has (no stop token ends a turn early), and the scripted ids are stored. The
KV cache then holds the model's own samples in place of the script's, the same number of
tokens, so the work equals decoding the script. Each mode runs in its own process (peak RSS
is per process) with a slot cache sized to the longest context it needs. ``--rows``
episodes decode together, as in a rollout.

``OUT.json``: ``prompt_tokens[mode][turns]`` (the context when turn ``turns`` starts),
``s_per_turn[mode][turns]`` (seconds of that turn, mean over the 3 turns ending there),
``peak_rss_mb[mode][turns]`` and ``kv_mb[mode][turns]`` (the KV bytes of that context), and
the goals: ``prompt_ratio_30_5`` (memory on; goal <= 1.2) and ``speedup_30_vs_<mode>``
(seconds of a 30-turn episode, full history over memory; goal >= 3). Two full-history
baselines: ``full`` on agentrl's engine (each episode's KV cache kept across turns: a turn
prefills only its delta) and ``full_reencode`` (the whole history prefilled every turn, as
a batch ``generate`` without a session does). Not a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from agentrl.chat.render import stop_token_ids, tokenize
from agentrl.config.memory import MemoryConfig
from agentrl.engine.decoder import Engine
from agentrl.engine.kv import kv_shape
from agentrl.envs import make
from agentrl.envs.tasks.weather import CITIES
from agentrl.policy.generate import Sample
from agentrl.policy.loading import load_policy
from agentrl.rollout import EpisodeSpec, run_episodes

REPORT = (5, 10, 20, 30)
MODES = ("memory", "full", "full_reencode")
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>'


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="agentrl/tiny")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--rows", type=int, default=4, help="episodes decoding together")
    p.add_argument("--turns", type=int, default=30)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: steady timings on a shared machine; 0: torch's own)",
    )
    p.add_argument("--rewrite-every", type=int, default=1, help="rollout.memory.rewrite_every")
    p.add_argument(
        "--budget", type=int, default=160, help="rollout.memory.budget_tokens (the note's budget)"
    )
    p.add_argument(
        "--modes",
        default=",".join(MODES),
        help="comma-separated modes to run; 'memory' is needed for the goals' ratios",
    )
    p.add_argument(
        "--sizes-only",
        action="store_true",
        help="only count each mode's prompt tokens (the scripted ids fix them; no decoding, "
        "seconds): prompt_tokens and prompt_ratio_30_5",
    )
    p.add_argument("--mode", choices=MODES, default=None, help="(internal) run one mode")
    return p.parse_args(argv)


def script_ids(tok, turns: int) -> list[list[int]]:
    """The scripted turns' ids (stop token last): a call per turn."""
    stop = stop_token_ids(tok)[0]
    return [tokenize(tok, CALL % CITIES[t % len(CITIES)]) + [stop] for t in range(turns)]


class Script:
    """A batch-``generate`` policy that plays the script (no model): sizes the contexts."""

    def __init__(self, tok, script):
        self.tokenizer, self.script, self.turn = tok, script, 0
        self.seen: list[int] = []

    def generate(self, prompts, **kwargs):
        ids = self.script[self.turn]
        self.seen.append(max(map(len, prompts)))
        self.turn += 1
        return [Sample(list(ids), [0.0] * len(ids), True) for _ in prompts]


class Reencode:
    """Full history without a cross-turn cache (transformers-style ``generate``): every
    turn the engine prefills the whole history again, then decodes the scripted length."""

    def __init__(self, engine: Engine, script):
        self.engine, self.tokenizer, self.script = engine, engine.tokenizer, script
        self.context: dict[int, list[int]] = {}
        self.ends: dict[int, list[float]] = {}

    def generate(self, prompts, **kwargs):
        turn = len(self.ends.get(0, []))
        ids = self.script[turn]
        samples = self.engine.generate(prompts, max_new_tokens=len(ids), temperature=1.0)
        now = time.perf_counter()
        for k, p in enumerate(prompts):
            self.context.setdefault(k, []).append(len(p))
            self.ends.setdefault(k, []).append(now)
        return [Sample(list(ids), s.logprobs, True) for s in samples]


class TimedScript:
    """The engine decodes each turn for real (as many tokens as the scripted turn); the
    scripted ids are returned. Records each turn's context length and end time."""

    supports_sessions = True

    def __init__(self, engine: Engine, script):
        self.engine, self.tokenizer, self.script = engine, engine.tokenizer, script
        self.context: dict[int, list[int]] = {}  # key -> context length at each turn start
        self.ends: dict[int, list[float]] = {}  # key -> end time of each turn
        self.length: dict[int, int] = {}

    def shared_prefix(self, prompts):
        return self.engine.shared_prefix(prompts)

    def session(self, n, capacity, **options):
        sess = Engine(self.engine.model, self.tokenizer, [], self.engine.pad_id).session(
            n, capacity, **options
        )
        add, extend, step = sess.add, sess.extend, sess.step

        def turn_budget(key) -> int:
            return len(self.script[len(self.ends.setdefault(key, []))])

        def on_add(key, prompt, max_new, seed):
            self.length[key] = len(prompt)
            self.context.setdefault(key, []).append(len(prompt))
            add(key, prompt, turn_budget(key), seed)

        def on_extend(key, delta, max_new):
            self.length[key] += len(delta)
            self.context[key].append(self.length[key])
            extend(key, delta, turn_budget(key))

        def on_step():
            out = []
            for key, sample in step():
                ids = self.script[len(self.ends[key])]
                self.ends[key].append(time.perf_counter())
                self.length[key] += len(ids)
                out.append((key, Sample(list(ids), sample.logprobs, True)))
            return out

        sess.add, sess.extend, sess.step = on_add, on_extend, on_step
        return sess


def play(generator, memory, rows: int, turns: int, capacity: int):
    env = lambda: make("weather", fault_rate=0.0, max_turns=turns)  # noqa: E731
    specs = [EpisodeSpec(seed=s, level=1, group_id=s) for s in range(rows)]
    return run_episodes(generator, env, specs, max_new_tokens=64, max_total_tokens=capacity,
                        memory=memory)  # fmt: skip


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident memory of this process in MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def memory_config(args, mode: str) -> MemoryConfig | None:
    if mode != "memory":
        return None
    return MemoryConfig(enabled=True, rewrite_every=args.rewrite_every, budget_tokens=args.budget)


def prompt_sizes(args, modes: list[str]) -> dict:
    """Each mode's largest context (over ``--rows`` episodes) at the start of the reported
    turns, from a scripted pass: no model decodes."""
    _, tok = load_policy(args.model)
    script = script_ids(tok, args.turns)
    sizes = {}
    for mode in modes:
        dry = Script(tok, script)
        play(dry, memory_config(args, mode), args.rows, args.turns, 1 << 16)
        sizes[mode] = {t: dry.seen[t - 1] for t in REPORT if t <= args.turns}
    return sizes


def run_mode(args) -> dict:
    """One mode in this process: per-turn context, seconds, peak RSS and KV megabytes."""
    model, tok = load_policy(args.model)
    script = script_ids(tok, args.turns)
    memory = memory_config(args, args.mode)
    dry = Script(tok, script)
    play(dry, memory, 1, args.turns, 1 << 16)
    capacity = max(dry.seen) + max(map(len, script)) + 8
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    if args.mode == "full_reencode":
        engine = Engine(model, tok, [], tok.pad_token_id)  # no stop: the scripted length
    timing = Reencode if args.mode == "full_reencode" else TimedScript
    play(timing(engine, script), memory, 1, 2, capacity)  # warm-up: allocator, kernels
    timed = timing(engine, script)
    peaks: list[float] = []
    start = time.perf_counter()
    trajs = play(timed, memory, args.rows, args.turns, capacity)
    ends = [max(timed.ends[k][t] for k in timed.ends) for t in range(args.turns)]
    peaks.append(rss_mb()[1])
    seconds = [b - a for a, b in zip([start, *ends], ends, strict=False)]
    layers, heads, dim = kv_shape(model)
    per_token = layers * 2 * heads * dim * next(model.parameters()).element_size()
    ctx = [max(timed.context[k][t] for k in timed.context) for t in range(args.turns)]
    return {
        "prompt_tokens": {t: ctx[t - 1] for t in REPORT if t <= args.turns},
        "s_per_turn": {
            t: sum(seconds[max(0, t - 3) : t]) / min(3, t) for t in REPORT if t <= args.turns
        },  # fmt: skip
        "kv_mb": {t: args.rows * ctx[t - 1] * per_token / 2**20 for t in REPORT if t <= args.turns},
        "peak_rss_mb": peaks[-1],
        "episode_s": ends[-1] - start,
        "capacity": capacity,
        "segments": [len(t.contexts()) for t in trajs],
        "turns": [t.info["turns"] for t in trajs],
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.mode is not None:
        print(json.dumps(run_mode(args)))
        return {}
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or "memory" not in modes:
        sys.exit(f"--modes: needs 'memory' and only {', '.join(MODES)}; got {args.modes!r}")
    out: dict = {"model": args.model, "rows": args.rows, "turns": args.turns,
                 "budget_tokens": args.budget}  # fmt: skip
    if args.sizes_only:
        out["prompt_tokens"] = sizes = prompt_sizes(args, modes)
        last = max(sizes["memory"])
        out["prompt_ratio_30_5"] = sizes["memory"][last] / sizes["memory"][5]
        return report(out, args.json)
    results = {}
    for mode in modes:
        cmd = [sys.executable, __file__, "--mode", mode, "--model", args.model, "--rows",
               str(args.rows), "--turns", str(args.turns), "--threads", str(args.threads),
               "--rewrite-every", str(args.rewrite_every),
               "--budget", str(args.budget)]  # fmt: skip
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("prompt_tokens", "s_per_turn", "kv_mb", "peak_rss_mb", "episode_s",
                "segments"):  # fmt: skip
        out[key] = {mode: results[mode][key] for mode in modes}
    mem = results["memory"]
    last = str(max(int(t) for t in mem["prompt_tokens"]))
    out["prompt_ratio_30_5"] = mem["prompt_tokens"][last] / mem["prompt_tokens"]["5"]
    if "full" in results:
        full = results["full"]
        out["full_prompt_ratio_30_5"] = full["prompt_tokens"][last] / full["prompt_tokens"]["5"]
    for name in [m for m in ("full", "full_reencode") if m in results]:
        other = results[name]
        out[f"speedup_30_vs_{name}"] = other["episode_s"] / mem["episode_s"]
        out[f"turn_speedup_30_vs_{name}"] = other["s_per_turn"][last] / mem["s_per_turn"][last]
    return report(out, args.json)


def report(out: dict, path: Path | None) -> dict:
    """Print ``out`` as JSON, and write it to ``path`` when given."""
    text = json.dumps(out, indent=1)
    print(text)
    if path is not None:
        path.write_text(text)
    return out


if __name__ == "__main__":
    main()
