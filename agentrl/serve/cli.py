"""``agentrl serve`` (registered by ``agentrl.cli``)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

console = Console(stderr=True)


def serve_cmd(
    model: str = typer.Argument(
        ...,
        help="Run directory, saved model path, hub id or packaged model (agentrl/smollm2-135m).",
    ),
    host: str = typer.Option("127.0.0.1", help="Interface (default: loopback only)."),
    port: int = typer.Option(8000, min=0, max=65535, help="Port."),
    api_key: str = typer.Option(
        None,
        "--api-key",
        envvar="AGENTRL_API_KEY",
        help="Require 'Authorization: Bearer KEY' on /v1/ routes.",
    ),
    name: str = typer.Option(None, help="Model id clients send (default: the path's last part)."),
    context: int = typer.Option(
        None,
        help="Tokens per request, prompt and reply (default 4096, at most the model's positions).",
    ),
    slots: int = typer.Option(8, min=1, help="Requests decoded together (the rest queue)."),
    on_busy: str = typer.Option(
        "wait",
        "--on-busy",
        help="Another server is loading the same model: wait for it, or fail at once.",
    ),
    record: str = typer.Option(
        None,
        "--record",
        help="Record every completion token-exactly (prompt ids, sampled ids, log-probs, loss "
        "mask) to DIR/records.jsonl, grouped by session (X-Agentrl-Session header or 'user'); "
        "POST /v1/agentrl/reward stores each session's reward in DIR/rewards.jsonl.",
    ),
    constrained: str = typer.Option(
        "off",
        help="tool_calls: constrain tool_choice 'auto' replies with the tool-call grammar (any "
        "call they write is well-formed); 'required' and named functions always are.",
    ),
) -> None:
    """Serve MODEL behind an OpenAI-compatible API: POST /v1/chat/completions (tools, tool
    calls, streaming, n, stop), GET /v1/models, GET /health. Concurrent requests decode
    together in one continuously batched session. With --record DIR, sessions are recorded
    for training and POST /v1/agentrl/reward takes their rewards. Ctrl-C stops it."""
    from agentrl.serve.lock import ServerBusy
    from agentrl.serve.run import build_server
    from agentrl.serve.run import serve as run_server

    def log(message: str) -> None:
        console.print(f"agentrl serve: {escape(message)}")

    try:
        server = build_server(model, name=name, context=context, slots=slots, api_key=api_key,
                              on_busy=on_busy, record=record, log=log,
                              constrained=constrained)  # fmt: skip
    except (OSError, ValueError, ServerBusy) as err:
        fail(str(err))
    except ImportError as err:
        fail(f"agentrl serve needs fastapi and uvicorn: pip install 'agentrl[monitor]' ({err})")
    served = server.state.model_name
    console.print(f"agentrl serve: http://{host}:{port}/v1  (model {served}; Ctrl-C stops)")
    run_server(server, host, port, log)


def fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(2)
