"""The viewer's server: a FastAPI app over one run directory, serving a static page and a small
JSON API. Everything is read from the run's files on each request, so a live run's new steps
and episodes appear on reload.

    GET /                     the page (static/index.html)
    GET /api/run              state, summary, config, doctor findings
    GET /api/curves           step metrics and evaluation points
    GET /api/facets           the values each filter can take
    GET /api/episodes         episode summaries, filtered (query: source, termination, env,
                              level, step, success, layer, layer_min, layer_max, limit)
    GET /api/episodes/{id}    one whole episode: turns, tool calls, reward breakdown, spans
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STATIC = Path(__file__).parent / "static"
#: The step metrics the page draws (the rest stay in /api/curves for scripts).
CURVE_KEYS = ("reward/total", "rollout/success_rate", "loss/kl", "policy/entropy",
              "reward/format", "reward/completion", "loss/value")  # fmt: skip


def create_app(run_dir: str | Path):
    """The app for ``run_dir``; FileNotFoundError where it is not a run directory."""
    from fastapi import FastAPI, HTTPException, Query
    from fastapi.responses import FileResponse
    from fastapi.staticfiles import StaticFiles

    from agentrl.monitor.doctor import diagnose, run_state
    from agentrl.monitor.episodes import EpisodeIndex, matches
    from agentrl.monitor.rundata import load_run

    run = Path(run_dir)
    load_run(run, recent_steps=0)  # fails here, before serving, where run_dir is not a run
    index = EpisodeIndex(run)
    app = FastAPI(title=f"agentrl view {run}", docs_url=None, redoc_url=None)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/api/run")
    def run_info() -> dict[str, Any]:
        data = load_run(run, recent_steps=5)
        return {"run_dir": str(run), "state": run_state(data), "steps_logged": len(data.metrics),
                "summary": data.summary, "config": data.config, "alerts": data.alerts[-20:],
                "findings": [f.to_json() for f in diagnose(data)]}  # fmt: skip

    @app.get("/api/curves")
    def curves() -> dict[str, Any]:
        data = load_run(run, recent_steps=0)
        keys = [k for k in CURVE_KEYS if data.series(k)]
        points = {k: [[s, v] for s, v in data.points(k) if v == v] for k in keys}
        evals = [[p["step"], p["success_rate"]] for p in data.evals]
        return {"series": points, "evals": evals}

    @app.get("/api/facets")
    def facets() -> dict[str, list]:
        eps = index.all()

        def values(key):  # noqa: E306 - a tiny local helper
            return sorted({e[key] for e in eps if e[key] is not None}, key=str)

        layers = sorted({k for e in eps for k in e["layers"]})
        return {"source": values("source"), "termination": values("termination"),
                "env": values("env"), "level": values("level"), "step": values("step"),
                "layer": ["total", *layers]}  # fmt: skip

    @app.get("/api/episodes")
    def episodes(
        source: str | None = None,
        termination: str | None = None,
        env: str | None = None,
        level: int | None = None,
        step: int | None = None,
        success: bool | None = None,
        layer: str | None = None,
        layer_min: float | None = None,
        layer_max: float | None = None,
        limit: int = Query(500, ge=1, le=10000),
    ) -> dict[str, Any]:
        filters = {"source": source, "termination": termination, "env": env, "level": level,
                   "step": step, "success": success, "layer": layer, "layer_min": layer_min,
                   "layer_max": layer_max}  # fmt: skip
        hits = [e for e in index.all() if matches(e, filters)]
        return {"total": len(hits), "episodes": hits[:limit]}

    @app.get("/api/episodes/{episode_id}")
    def episode(episode_id: str) -> dict[str, Any]:
        try:
            return index.get(episode_id)
        except KeyError as err:
            raise HTTPException(status_code=404, detail=err.args[0]) from None

    return app


def serve(app, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve ``create_app``'s app until interrupted (loopback unless ``host`` says otherwise)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning")
