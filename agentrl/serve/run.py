"""Load a model for ``agentrl serve`` and run the server (uvicorn)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.serve.lock import init_lock, session_file

DEFAULT_CONTEXT = 4096


def build_server(
    model_or_run_dir: str,
    *,
    name: str | None = None,
    context: int | None = None,
    slots: int = 8,
    api_key: str | None = None,
    device: str = "cpu",
    on_busy: str = "wait",
    record: str | Path | None = None,
    log: Callable[[str], None] = print,
    constrained: str = "off",
) -> Any:
    """The FastAPI app for a model path, hub id, packaged model or run directory, loaded
    under the model's init lock (``agentrl.serve.lock``; ``on_busy``: wait or fail).
    ``record``: a directory for token-exact session records and rewards
    (``agentrl.serve.record``). ``constrained``: ``tool_calls`` constrains ``tool_choice:
    auto`` replies with the tool-call grammar (``required`` always is)."""
    from agentrl.eval.api import load_eval_engine
    from agentrl.policy.roles import refuse_role_adapter_run
    from agentrl.serve.app import create_app
    from agentrl.serve.record import Recorder

    refuse_role_adapter_run(model_or_run_dir, "a server")
    with init_lock(model_or_run_dir, on_busy=on_busy, log=log) as key:
        engine = load_eval_engine(model_or_run_dir, device, exact=False)
    limit = int(getattr(engine.model.config, "max_position_embeddings", DEFAULT_CONTEXT))
    capacity = min(context or DEFAULT_CONTEXT, limit)
    served = name or Path(model_or_run_dir.rstrip("/")).name or model_or_run_dir
    recorder = Recorder(engine.tokenizer, record) if record is not None else None
    app = create_app(engine, served, capacity=capacity, slots=slots, api_key=api_key,
                     recorder=recorder, constrained=constrained)  # fmt: skip
    app.state.model_key = key
    return app


def serve(app: Any, host: str, port: int, log: Callable[[str], None] = print) -> None:
    """Run ``app`` with uvicorn, with a session file while it serves."""
    import uvicorn

    info = {"host": host, "port": port, "model": app.state.model_name}
    with session_file(app.state.model_key, info, log):
        uvicorn.run(app, host=host, port=port, log_level="info")
