"""An LLM judge as a reward layer (``reward.judge``): each training episode is scored by a model
behind an OpenAI-compatible endpoint, and the score joins the episode's reward as the ``judge``
layer (weight ``reward.judge.weight``).

    python examples/llm_judge.py                      # a scripted judge on a local port
    python examples/llm_judge.py --judge-url http://127.0.0.1:8000/v1 --judge-model NAME

Without ``--judge-url`` the judge is a small scripted OpenAI-compatible server started here (a
rule that reads the transcript it is sent: 1 if the final answer repeats the numbers the tools
returned), so the example runs anywhere; any real endpoint (``agentrl serve MODEL``, ``vllm
serve``, a hosted API) works the same way. The same run from the command line: ``agentrl train
configs/weather_grpo.yaml --set reward.judge.enabled=true --set reward.judge.model=NAME --set
reward.judge.base_url=URL``. Each step prints the judge's mean score, its requests, cache hits
and faults (a timeout or an unreadable reply leaves the layer out of that episode: never a 0).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

from fastapi import FastAPI, Request  # the scripted judge's server (pip install -e ".[monitor]")

from agentrl.config import build_config
from agentrl.serve.background import BackgroundServer
from agentrl.train import train


def scripted_judge() -> BackgroundServer:
    """A tiny OpenAI-compatible chat-completions server that judges by a rule, started on a
    free loopback port."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> dict:
        body = await request.json()
        lines = body["messages"][-1]["content"].split("Attempt:\n", 1)[-1].splitlines()
        numbers = {n for ln in lines if ln.startswith("tool") for n in re.findall(r"\d+", ln)}
        final = next((ln for ln in reversed(lines) if ln.startswith("assistant: ")), "")
        score = 1.0 if numbers and all(n in final for n in numbers) else 0.0
        message = {"role": "assistant", "content": json.dumps({"score": score})}
        return {
            "id": "j",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }

    server = BackgroundServer(app, name="scripted-judge")
    server.start()
    return server


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="agentrl/tiny")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--judge-url", help="an OpenAI-compatible endpoint (default: scripted)")
    p.add_argument("--judge-model", default="scripted")
    p.add_argument("--mode", default="absolute", choices=["absolute", "relative"])
    args = p.parse_args()
    url = args.judge_url
    if url is None:
        url = f"http://127.0.0.1:{scripted_judge().port}/v1"
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cfg = build_config({}, [
            f"model.name={args.model}", f"train.run_dir={run}", f"train.steps={args.steps}",
            "train.warmstart_demos=32", "train.eval_episodes=0", "train.general_check=false",
            "rollout.group_size=4", "rollout.groups_per_step=2",
            "reward.judge.enabled=true", f"reward.judge.base_url={url}",
            f"reward.judge.model={args.judge_model}", f"reward.judge.mode={args.mode}",
            f"reward.judge.cache_path={run / 'judge_cache.jsonl'}",
        ])  # fmt: skip
        train(cfg, progress=False)
        for line in (run / "metrics.jsonl").read_text().splitlines():
            m = json.loads(line)
            print(f"step {m['step']}: judge score {m['judge/score_mean']:.2f} on "
                  f"{m['judge/judged']:.0f} episodes ({m['judge/requests']:.0f} requests, "
                  f"{m['judge/cache_hits']:.0f} cache hits, {m['reward/judge_faults']:.0f} "
                  f"faults)  success {m['rollout/success_rate']:.2f}  reward "
                  f"{m['reward/total']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
