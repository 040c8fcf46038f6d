"""Serve a model or a trained run behind an OpenAI-compatible API (``agentrl serve``).

``create_app`` (``agentrl.serve.app``) builds the FastAPI app; ``Batcher`` and ``Job``
(``agentrl.serve.batcher``) are its continuous-batching loop. FastAPI and uvicorn come with the
``monitor`` extra, so they are imported only when used.
"""

from typing import Any

__all__ = ["Batcher", "Job", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from agentrl.serve.app import create_app

        return create_app
    if name in ("Batcher", "Job"):
        from agentrl.serve import batcher

        return getattr(batcher, name)
    raise AttributeError(name)
