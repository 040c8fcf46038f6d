"""How often an LLM judge agrees with the rule-based verifier on held-out episodes: agreement
(the judge's accuracy with the verifier as truth), precision / recall of "success" and Cohen's
kappa, the judge's score thresholded at ``--threshold``. A benchmark, not a test.

Episodes (``--sources``): ``noisy_reference``, the env's reference solver whose final answer
has its digits changed with probability ``--corrupt`` (a mix of verified successes and
failures with realistic transcripts); ``model``, ``--model`` played greedily by agentrl's
engine (the tiny model: almost all failures). Judges (``--judges``), each asked exactly as
``reward.judge`` asks during training (``agentrl.rewards.judge``): ``scripted``, a fake
OpenAI-compatible endpoint whose rule reads only the request's transcript (1 if the final
answer repeats every number the tools returned) and shows the pipeline's numbers; ``self``,
``--model`` itself behind agentrl's own server (``agentrl serve``, in-process); ``endpoint``,
any OpenAI-compatible server (``--judge-url``, ``--judge-model``).

    python bench/judge_agreement.py --json judge_agreement.json
    python bench/judge_agreement.py --judges endpoint --judge-url http://127.0.0.1:8000/v1 \
        --judge-model Qwen/Qwen2.5-7B-Instruct --episodes 96
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from typing import Any

from agentrl.config import build_config
from agentrl.envs import make
from agentrl.eval.policies import run_text_episode
from agentrl.rewards.agreement import judge_agreement
from agentrl.rewards.judge import LLMJudge


class NoisyReference:
    """The reference solver; its final answer's digits changed with probability ``p``."""

    name = "noisy_reference"

    def __init__(self, p: float, seed: int) -> None:
        self.p, self.rng = p, random.Random(seed)

    def act(self, env: Any) -> str:
        action = env.reference_action()
        if "<tool_call>" in action or self.rng.random() >= self.p:
            return action
        changed = re.sub(r"\d", lambda m: str((int(m.group()) + 3) % 10), action)
        return changed if changed != action else "I could not find that out."


def reference_episodes(n: int, corrupt: float, env_id: str) -> list[dict[str, Any]]:
    policy = NoisyReference(corrupt, seed=0)
    return [run_text_episode(policy, make(env_id), 10_000 + i, 1 + i % 3) for i in range(n)]


def model_episodes(model: str, n: int, env_id: str) -> list[dict[str, Any]]:
    from agentrl.eval.api import load_eval_engine
    from agentrl.eval.runner import evaluate

    engine = load_eval_engine(model, "cpu")
    _, trajs = evaluate(engine, lambda *_: make(env_id), episodes=n, levels=[1, 2, 3],
                        seed0=10_000, max_new_tokens=64, max_total_tokens=1024)  # fmt: skip
    return [{"messages": t.messages, "success": t.success} for t in trajs]


def scripted_reply(request: Any) -> Any:
    """The scripted judge: 1 if the last assistant line repeats every number the tools gave."""
    import httpx

    body = json.loads(request.content)
    attempt = body["messages"][-1]["content"].split("Attempt:\n", 1)[-1]
    lines = attempt.splitlines()
    tool_numbers = {n for ln in lines if ln.startswith("tool") for n in re.findall(r"\d+", ln)}
    said = [ln for ln in lines if ln.startswith("assistant: ")]
    final = said[-1] if said else ""
    ok = bool(tool_numbers) and all(n in final for n in tool_numbers)
    msg = {"role": "assistant", "content": json.dumps({"score": 1.0 if ok else 0.0})}
    return httpx.Response(
        200,
        json={
            "id": "s",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
        },
    )


def judge_config(url: str, model: str, args: argparse.Namespace):
    return build_config({}, ["reward.judge.enabled=true", f"reward.judge.model={model}",
                             f"reward.judge.base_url={url}", f"reward.judge.retries={args.retries}",
                             f"reward.judge.timeout_s={args.timeout}",
                             "reward.judge.max_tokens=16",  # every episode asked (no breaker):
                             "reward.judge.breaker_failures=100000"]).reward.judge  # fmt: skip


def serve_model(model: str) -> tuple[Any, str, str]:
    """agentrl's own server for ``model`` in a thread: (its BackgroundServer, base URL, name)."""
    from agentrl.serve.background import BackgroundServer
    from agentrl.serve.run import build_server

    app = build_server(model, log=lambda _: None)
    server = BackgroundServer(app, name="judge-server")
    return server, server.start() + "/v1", app.state.model_name


def measure(judge: LLMJudge, episodes: list[dict[str, Any]], threshold: float) -> dict:
    t0, before = time.perf_counter(), dict(judge.counts)
    scores = [judge.score(e["messages"]) for e in episodes]
    out = judge_agreement(scores, [e["success"] for e in episodes], threshold)
    out["fault_kinds"] = {k.removeprefix("fault_"): v - before.get(k, 0)
                          for k, v in judge.counts.items() if k.startswith("fault_")}  # fmt: skip
    out["seconds_per_episode"] = (time.perf_counter() - t0) / max(1, len(episodes))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="agentrl/tiny")
    p.add_argument("--env", default="weather")
    p.add_argument("--episodes", type=int, default=48)
    p.add_argument("--corrupt", type=float, default=0.5, help="share of answers corrupted")
    p.add_argument("--sources", nargs="+", default=["noisy_reference", "model"],
                   choices=["noisy_reference", "model"])  # fmt: skip
    p.add_argument("--judges", nargs="+", default=["scripted", "self"],
                   choices=["scripted", "self", "endpoint"])  # fmt: skip
    p.add_argument("--judge-url", default="http://127.0.0.1:8000/v1")
    p.add_argument("--judge-model", default="")
    p.add_argument("--threshold", type=float, default=0.5)
    p.add_argument("--retries", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    import httpx

    sources = {"noisy_reference": lambda: reference_episodes(args.episodes, args.corrupt, args.env),
               "model": lambda: model_episodes(args.model, args.episodes, args.env)}  # fmt: skip
    report: dict[str, Any] = {"model": args.model, "env": args.env, "threshold": args.threshold}
    server = None
    try:
        judges: dict[str, LLMJudge] = {}
        for name in args.judges:
            if name == "scripted":
                client = httpx.Client(transport=httpx.MockTransport(scripted_reply))
                judges[name] = LLMJudge(judge_config("http://scripted/v1", "scripted", args),
                                        http_client=client)  # fmt: skip
            elif name == "self":
                server, url, served = serve_model(args.model)
                judges[name] = LLMJudge(judge_config(url, served, args))
            else:
                judges[name] = LLMJudge(judge_config(args.judge_url, args.judge_model, args))
        for source in args.sources:
            episodes = sources[source]()
            rate = sum(e["success"] for e in episodes) / len(episodes)
            report[source] = {"episodes": len(episodes), "verifier_success_rate": rate}
            for name, judge in judges.items():
                report[source][name] = measure(judge, episodes, args.threshold)
                a = report[source][name]
                figures = (
                    "no episode scored"
                    if a["kappa"] is None
                    else f"agreement {a['agreement']:.3f} kappa {a['kappa']:+.3f}"
                )
                print(
                    f"{source:16s} judge={name:9s} {figures}, faults {a['faults']:.0f}/"
                    f"{len(episodes)} {a['fault_kinds']} (verifier success {rate:.2f})"
                )
    finally:
        if server is not None:
            server.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
