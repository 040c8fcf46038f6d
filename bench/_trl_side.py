"""TRL's side of ``rollout_grpo.py``: ``GRPOTrainer`` on the weather task with the tiny model.

Multi-turn tool calling uses ``environment_factory``: ``WeatherTools`` wraps one agentrl weather
env per rollout; ``reset(**row)`` starts the dataset row's task instance and its
``get_weather`` / ``get_local_time`` methods (the tools TRL exposes) call that env's tools
through its guard and return the same JSON text an agentrl episode sees. The reward is the
weather env's ``RewardBreakdown`` total: ``weather_reward`` replays each TRL conversation
through a fresh env (same seed and level, so the same world and the same seeded faults).

TRL only recognizes chat templates it ships, by exact string, to parse tool calls out of the
model's output; the tiny tokenizer's template (``agentrl/chat/template.py``) writes the same
Qwen2.5 format, so the bench sets ``tokenizer.chat_template`` to TRL's own ``qwen2_5.jinja``
(read from the installed trl package) at runtime. For these prompts (the env always sends a
system prompt) both templates render the same text.
"""

from __future__ import annotations

import argparse
import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

from agentrl.types import ToolCall


def _render_turn(message: dict[str, Any]) -> str:
    """Assistant text as the model wrote it (Qwen2.5 format) from TRL's parsed message."""
    parts = [message.get("content") or ""]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        body = json.dumps({"name": fn.get("name"), "arguments": fn.get("arguments", {})})
        parts.append(f"\n<tool_call>\n{body}\n</tool_call>")
    return "".join(parts).strip()


def run_trl(
    args: argparse.Namespace, workdir: Path, instances: list[list[tuple[int, int]]]
) -> dict[str, Any]:
    try:
        return _run_trl(args, workdir, instances, single_turn=args.single_turn)
    except Exception as exc:  # noqa: BLE001 - report why, then fall back to what TRL can do
        if args.single_turn:
            return {"error": f"{type(exc).__name__}: {exc}"}
        reason = f"multi-turn tool calling failed ({type(exc).__name__}: {exc})"
        print(f"[bench] TRL {reason}; falling back to single-turn GRPO", flush=True)
        try:
            res = _run_trl(args, workdir, instances, single_turn=True)
        except Exception as exc2:  # noqa: BLE001
            return {"error": f"{reason}; single-turn also failed ({type(exc2).__name__}: {exc2})"}
        res["notes"].insert(0, f"FALLBACK to single-turn GRPO: {reason}")
        return res


def _run_trl(
    args: argparse.Namespace,
    workdir: Path,
    instances: list[list[tuple[int, int]]],
    *,
    single_turn: bool,
) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl import __version__ as trl_version

    from agentrl.config import build_config
    from agentrl.policy.loading import load_tokenizer, resolve_model_dir
    from agentrl.train.build import env_factory

    cfg = build_config(
        {"task": {"env": "weather", "levels": args.levels, "max_turns": args.max_turns}}
    )
    make_env = env_factory(cfg)  # same env kwargs (max_turns, reward weights) as agentrl's side
    notes: list[str] = []

    path = resolve_model_dir(args.model)  # the cached model agentrl's side loaded
    tok = load_tokenizer(path)  # split as pretrained (AutoTokenizer would split digits)
    tok.chat_template = (resources.files("trl") / "chat_templates" / "qwen2_5.jinja").read_text(
        encoding="utf-8"
    )
    tok.padding_side = "left"
    notes.append(
        "tokenizer.chat_template set to TRL's shipped qwen2_5.jinja (same Qwen2.5 format "
        "as agentrl's template) so TRL recognizes it and parses tool calls"
    )
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)

    class WeatherTools:
        """One weather episode's tools, for TRL's ``environment_factory``."""

        def __init__(self) -> None:
            self.env = make_env()

        def reset(self, seed: int, level: int, **_: Any) -> None:
            self.env.reset(seed=int(seed), options={"level": int(level)})

        def get_weather(self, city: str):
            """Current temperature (Celsius) and condition in a city.

            Args:
                city: City name, e.g. "Paris".
            """
            return self.env.guard.call(ToolCall("get_weather", {"city": city})).content

        def get_local_time(self, city: str):
            """Local time (HH:MM) in a city.

            Args:
                city: City name.
            """
            return self.env.guard.call(ToolCall("get_local_time", {"city": city})).content

    from transformers.utils import get_json_schema

    probe = WeatherTools()
    ours = {s["function"]["name"]: s for s in probe.env.tool_schemas}
    for fn in (probe.get_weather, probe.get_local_time):
        if get_json_schema(fn) != ours[fn.__name__]:
            notes.append(f"tool schema of {fn.__name__} differs from agentrl's")
    notes.append(
        "TRL lists tools alphabetically (get_local_time first): the prompt is the same "
        "text with the two tool lines swapped"
    )

    eos_ids = {tok.convert_tokens_to_ids("<|im_end|>"), tok.pad_token_id}

    def weather_reward(completions, seed, level, completion_ids=None, **_: Any) -> list[float]:
        """The env's RewardBreakdown total, replaying each conversation through a fresh env."""
        rewards = []
        for i, conv in enumerate(completions):
            env = make_env()
            env.reset(seed=int(seed[i]), options={"level": int(level[i])})
            turns = (
                [m for m in conv if m.get("role") == "assistant"]
                if isinstance(conv, list)
                else [{"role": "assistant", "content": conv}]
            )
            truncated = (
                bool(completion_ids) and completion_ids[i] and completion_ids[i][-1] not in eos_ids
            )
            if truncated:
                turns = turns[:-1]  # a turn cut off by a token limit ends the episode: "length"
            for m in turns:
                if env.done:
                    break
                env.step(_render_turn(m))
            if not env.done:
                env.finish("length")
            rewards.append(env.breakdown.total)
        return rewards

    # Dataset: one row per group, in step order (no shuffling), so TRL plays the same instances.
    rows = []
    for step in instances[: args.steps]:
        for seed, level in step:
            messages, _ = make_env().reset(seed=seed, options={"level": level})
            rows.append({"prompt": messages, "seed": seed, "level": level})
    tool_schemas = probe.env.tool_schemas
    prompt_lens = [
        len(
            tok.apply_chat_template(
                r["prompt"],
                tools=tool_schemas,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
        )
        for r in rows
    ]
    # agentrl's episode limit includes the prompt; TRL's completion budget excludes it.
    max_completion = args.max_total_tokens - max(prompt_lens)
    episodes = args.groups * args.group_size
    gconf = GRPOConfig(
        output_dir=str(workdir / "trl_run"),
        use_cpu=True,
        bf16=args.trl_bf16,
        fp16=False,
        per_device_train_batch_size=episodes // 2,
        gradient_accumulation_steps=2,
        num_generations=args.group_size,
        max_steps=args.steps,
        max_completion_length=max_completion,
        generation_kwargs={"max_new_tokens": args.max_new_tokens},  # per-turn limit
        max_tool_calling_iterations=args.max_turns - 1,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.02,
        epsilon=0.2,
        learning_rate=cfg.algo.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=cfg.algo.weight_decay,
        max_grad_norm=cfg.algo.max_grad_norm,
        num_iterations=1,
        shuffle_dataset=False,
        seed=args.seed,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    notes.append(
        f"max_completion_length={max_completion} (episode budget {args.max_total_tokens}"
        f" - longest prompt {max(prompt_lens)}), generation max_new_tokens="
        f"{args.max_new_tokens} per turn, max_tool_calling_iterations="
        f"{args.max_turns - 1}; per_device_train_batch_size={episodes // 2} x "
        "gradient_accumulation_steps=2 = one optimizer step per "
        f"{episodes} episodes (agentrl: minibatches=2, two optimizer steps)"
    )
    notes.append(
        "TRL ends an episode on a turn without a parsable tool call (agentrl sends the "
        "parse error back and continues)"
    )
    kwargs: dict[str, Any] = {}
    if not single_turn:
        kwargs["environment_factory"] = WeatherTools
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[weather_reward],
        args=gconf,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        **kwargs,
    )

    gen: list[dict[str, float]] = []
    original = trainer._generate

    def timed_generate(prompts):
        t0 = time.perf_counter()
        out = original(prompts)
        elapsed = time.perf_counter() - t0
        completion_ids, tool_mask, completions = out[1], out[2], out[3]
        tokens = (
            sum(sum(m) for m in tool_mask)
            if tool_mask is not None
            else sum(len(c) for c in completion_ids)
        )
        turns = [
            sum(1 for m in c if m.get("role") == "assistant") if isinstance(c, list) else 1
            for c in completions
        ]
        seq_tokens = sum(len(p) + len(c) for p, c in zip(out[0], completion_ids, strict=True))
        gen.append(
            {
                "rollout_s": elapsed,
                "tokens": tokens,
                "episodes": len(prompts),
                "seq_tokens": seq_tokens,
                "turns": sum(turns) / len(turns),
            }
        )
        return out

    trainer._generate = timed_generate  # instance attribute: time TRL's own rollout

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.marks = [time.perf_counter()]

        def on_step_end(self, *a: Any, **k: Any) -> None:
            self.marks.append(time.perf_counter())

    timer = StepTimer()
    trainer.add_callback(timer)
    trainer.remove_callback(PrinterCallback)  # per-step log dicts; the bench prints its own table
    t0 = time.perf_counter()
    timer.marks[0] = t0
    trainer.train()
    wall = time.perf_counter() - t0

    logs = [h for h in trainer.state.log_history if "reward" in h]
    steps = []
    for i, g in enumerate(gen[: len(timer.marks) - 1]):
        step_s = timer.marks[i + 1] - timer.marks[i]
        steps.append(
            {
                "step_s": step_s,
                "rollout_s": g["rollout_s"],
                "update_s": step_s - g["rollout_s"],
                "tokens_per_s": g["tokens"] / g["rollout_s"],
                "trained_tokens_per_s": g["seq_tokens"] / (step_s - g["rollout_s"]),
                "episodes_per_s": g["episodes"] / g["rollout_s"],
                "policy_tokens_per_episode": g["tokens"] / g["episodes"],
                "turns_per_episode": g["turns"],
                "reward": logs[i]["reward"] if i < len(logs) else float("nan"),
            }
        )
    if len(gen) != args.steps:
        notes.append(f"{len(gen)} generation calls for {args.steps} steps")
    return {
        "steps": steps,
        "wall_s": wall,
        "notes": notes,
        "mode": "single-turn" if single_turn else "multi-turn environment_factory",
        "trl_version": trl_version,
    }
