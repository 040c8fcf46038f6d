"""Load test of ``agentrl serve`` on loopback: concurrent clients vs one request at a time.

Starts the server in-process on a free port (the model or run directory given), then sends
``--requests`` chat completions from ``--clients`` concurrent clients (the official ``openai``
client, greedy, ``--max-tokens`` each) and the first ``--sequential`` of them again one at a
time. Prints requests/s, completion tokens/s, p50/p95 latency, the 5xx count and the batching
ratio (concurrent throughput over sequential). Not a test: prints figures.

    python bench/serve_load.py agentrl/tiny-path --clients 64 --requests 1000 --sequential 64
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import openai

from agentrl.serve.background import BackgroundServer
from agentrl.serve.run import build_server

QUESTIONS = ["What's the weather in Paris?", "Is it warmer in Rome or Oslo?",
             "What time is it in Tokyo?", "Tell me the weather in Lima."]  # fmt: skip


def _serve(app) -> tuple[BackgroundServer, str]:
    server = BackgroundServer(app, name="serve-load", log_level="error")
    return server, server.start() + "/v1"


def _run(url: str, model: str, n: int, clients: int, max_tokens: int) -> dict:
    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=600)
    latencies, tokens, errors = [], [], 0

    def one(i: int) -> None:
        nonlocal errors
        t = time.perf_counter()
        try:
            r = client.chat.completions.create(
                model=model, temperature=0, max_tokens=max_tokens,
                messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
            )  # fmt: skip
            tokens.append(r.usage.completion_tokens)
        except openai.APIStatusError as err:
            errors += err.status_code >= 500
        latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(n)))
    wall = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=20)
    return {"requests": n, "clients": clients, "seconds": wall, "requests_per_s": n / wall,
            "tokens_per_s": sum(tokens) / wall, "p50_s": statistics.median(latencies),
            "p95_s": q[18], "server_errors": errors}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="Model path, packaged model or run directory.")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--sequential", type=int, default=64, help="Requests sent one at a time.")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    app = build_server(args.model, name="m", slots=args.slots, context=1024)
    server, url = _serve(app)
    together = _run(url, "m", args.requests, args.clients, args.max_tokens)
    alone = _run(url, "m", args.sequential, 1, args.max_tokens)
    ratio = together["tokens_per_s"] / alone["tokens_per_s"]
    for name, r in (("concurrent", together), ("one at a time", alone)):
        print(f"{name}: {r['requests']} requests, {r['clients']} clients, {r['seconds']:.1f} s, "
              f"{r['requests_per_s']:.2f} req/s, {r['tokens_per_s']:.1f} tok/s, p50 "
              f"{r['p50_s']:.2f} s, p95 {r['p95_s']:.2f} s, 5xx {r['server_errors']}")  # fmt: skip
    print(f"batching ratio (tokens/s concurrent / one at a time): {ratio:.2f}x")
    server.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"concurrent": together, "sequential": alone, "ratio": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
