"""The feedback endpoint a run serves with ``train.feedback.port`` set: ``POST /feedback``
(``{"episode_id", "rating"?, "correction"?}``: written as a file of ``run_dir/feedback``, the
same path as a file drop), ``GET /episodes?last=N`` (the newest rateable episodes and their
final answers), ``GET /health``. A bad body is a 400 naming the field."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentrl.train.feedback import FeedbackBook, write_feedback


def feedback_app(book: FeedbackBook, run_dir: str) -> FastAPI:
    """The FastAPI app of the feedback endpoint over ``book``."""
    app = FastAPI(title="agentrl feedback")

    @app.post("/feedback")
    async def post_feedback(request: Request) -> JSONResponse:
        try:
            body: Any = await request.json()
        except ValueError:
            return JSONResponse({"error": "the body must be a JSON object"}, status_code=400)
        if not isinstance(body, dict):
            return JSONResponse({"error": "the body must be a JSON object"}, status_code=400)
        try:
            path = write_feedback(run_dir, body.get("episode_id"), body.get("rating"),
                                  body.get("correction"))  # fmt: skip
        except ValueError as err:
            return JSONResponse({"error": str(err)}, status_code=400)
        return JSONResponse({"accepted": True, "file": path.name})

    @app.get("/episodes")
    def episodes(last: int = 20) -> list[dict[str, Any]]:
        return book.recent(max(1, min(last, 1000)))

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


@contextmanager
def serve_feedback(book: FeedbackBook, run_dir: str, host: str, port: int) -> Iterator[str]:
    """Serve the endpoint in a daemon thread while the block runs; yields its base URL."""
    import uvicorn

    if port == 0:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(feedback_app(book, run_dir), host=host, port=port,
                                           log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True, name="agentrl-feedback")
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        raise RuntimeError(f"train.feedback.port: the feedback endpoint did not start on "
                           f"{host}:{port} (is the port taken?)")  # fmt: skip
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
