"""An ASGI app served by uvicorn in a daemon thread while training goes on (the trainer's
agent server, the live-feedback endpoint)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any


class BackgroundServer:
    """Serve ``app`` on ``host:port`` (0: a free port) in a daemon thread named ``name``.

    ``start()`` binds the socket itself (so a taken port fails at once with ``OSError`` and a
    free port is never raced for), waits until uvicorn accepts requests and returns the base
    URL ``http://host:port``; ``stop()`` asks uvicorn to exit and joins the thread.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0,
                 name: str = "agentrl-server", **uvicorn_options: Any) -> None:  # fmt: skip
        self.app, self.host, self.port, self.name = app, host, port, name
        self.options = {"log_level": "warning", **uvicorn_options}
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 30.0) -> str:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(self.app, **self.options))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name=self.name, daemon=True)  # fmt: skip
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if not self._server.started:
            self.stop()
            raise RuntimeError(f"{self.name}: the server did not start on {self.host}:{self.port}")
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout_s: float = 15.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        self._server = self._thread = None
