"""Load a model for ``agentrl serve`` and run the server (uvicorn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_CONTEXT = 4096


def build_server(
    model_or_run_dir: str,
    *,
    name: str | None = None,
    context: int | None = None,
    slots: int = 8,
    api_key: str | None = None,
    device: str = "cpu",
) -> Any:
    """The FastAPI app for a model path, hub id, packaged model or run directory."""
    from agentrl.eval.api import load_eval_engine
    from agentrl.serve.app import create_app

    engine = load_eval_engine(model_or_run_dir, device)
    limit = int(getattr(engine.model.config, "max_position_embeddings", DEFAULT_CONTEXT))
    capacity = min(context or DEFAULT_CONTEXT, limit)
    served = name or Path(model_or_run_dir.rstrip("/")).name or model_or_run_dir
    return create_app(engine, served, capacity=capacity, slots=slots, api_key=api_key)


def serve(app: Any, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="info")
