"""The feedback endpoint a run serves with ``train.feedback.port`` set: ``POST /feedback``
(``{"episode_id", "rating"?, "correction"?}``: written as a file of ``run_dir/feedback``, the
same path as a file drop), ``GET /episodes?last=N`` (the newest rateable episodes and their
final answers), ``GET /health``. A bad body is a 400 naming the field."""

from __future__ import annotations

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
    from agentrl.serve.background import BackgroundServer

    server = BackgroundServer(feedback_app(book, run_dir), host, port, name="agentrl-feedback")
    try:
        url = server.start(timeout_s=20)
    except (OSError, RuntimeError) as err:
        raise RuntimeError(f"train.feedback.port: the feedback endpoint did not start on "
                           f"{host}:{port} (is the port taken?): {err}") from err  # fmt: skip
    try:
        yield url
    finally:
        server.stop(timeout_s=10)
