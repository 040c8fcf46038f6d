"""Helpers for agent programs trained through ``agentrl serve --record`` or
``agentrl train --agent`` (standard library only: an agent program imports nothing heavy).

``agentrl train --agent CMD`` runs CMD once per episode with ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``, ``AGENTRL_SESSION`` (the episode's session id) and ``AGENTRL_TASK`` (a JSON
task instance) in its environment. A program written with the official ``openai`` client
needs two lines to be trained::

    client = OpenAI(default_headers=session_headers())   # its requests join the episode
    ...
    report_reward(os.environ["OPENAI_BASE_URL"], session_id(), reward, success=True)
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from typing import Any

SESSION_HEADER = "X-Agentrl-Session"


def session_id() -> str | None:
    """This episode's session id (``AGENTRL_SESSION``), None outside training."""
    return os.environ.get("AGENTRL_SESSION") or None


def session_headers(session: str | None = None) -> dict[str, str]:
    """Headers that put a client's requests into ``session`` (default: ``AGENTRL_SESSION``);
    ``{}`` when there is none. Pass as ``OpenAI(default_headers=...)``."""
    session = session or session_id()
    return {SESSION_HEADER: session} if session else {}


def task_from_env() -> dict[str, Any] | None:
    """The task instance the trainer chose for this episode (``AGENTRL_TASK``, JSON): ``env``,
    ``seed``, ``level``, ``task_id``, ``messages`` (the env's opening messages) and ``tools``
    (its tool schemas); None when the variable is unset."""
    raw = os.environ.get("AGENTRL_TASK")
    return json.loads(raw) if raw else None


def reward_url(base_url: str) -> str:
    """The reward route of a server given its OpenAI base URL (``.../v1``) or its root."""
    base = base_url.rstrip("/")
    return f"{base}/agentrl/reward" if base.endswith("/v1") else f"{base}/v1/agentrl/reward"


def report_reward(base_url: str, session: str | None, reward: float,
                  success: bool | None = None, *, api_key: str | None = None,
                  timeout: float = 30.0) -> dict[str, Any]:  # fmt: skip
    """Report an episode's reward: ``POST /v1/agentrl/reward``. Returns the stored entry;
    raises ``ValueError`` with the server's message on a 4xx (e.g. an unknown session)."""
    body: dict[str, Any] = {"session": session, "reward": reward}
    if success is not None:
        body["success"] = success
    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(reward_url(base_url), json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        detail = err.read().decode(errors="replace")
        with contextlib.suppress(ValueError, KeyError, TypeError):
            detail = json.loads(detail)["error"]["message"]
        raise ValueError(f"reward not stored ({err.code}): {detail}") from err
