"""``agentrl serve``: an OpenAI-compatible chat-completions server over agentrl's engine.

Routes: ``POST /v1/chat/completions`` (``messages``, ``tools``, ``tool_choice`` auto / none /
required / a named function, ``temperature``, ``top_p``, ``max_tokens``, ``stop``, ``n``,
``seed``, ``stream``), ``GET /v1/models``, ``GET /health``. Concurrent requests decode
together in one continuously batched session (``Batcher``). Replies carry ``tool_calls``
parsed by agentrl's parser (``finish_reason: "tool_calls"``) and token usage; ``stream: true``
sends server-sent events, content deltas then one tool-call delta per call, as the OpenAI API
does. ``tool_choice`` ``required`` or a named function is enforced by the tool-call grammar
(``agentrl.engine.grammar``: the reply is calls only); with ``constrained="tool_calls"``
(``agentrl serve --constrained``) ``auto`` replies are constrained too (free text, but any call
well-formed). Every bad request is a 4xx with an OpenAI-style error body naming the field; a
bad or missing API key is a 401.

With a ``Recorder`` (``agentrl serve --record DIR``, and the trainer's own server for
``agentrl train --agent``) requests carry a session (the ``X-Agentrl-Session`` header, else the
``user`` field): a session's turns are built and recorded token-exactly
(``agentrl.serve.record``), and ``POST /v1/agentrl/reward`` (``{"session", "reward",
"success"?}``) stores the episode's reward.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from agentrl.chat.render import encode_prompt
from agentrl.engine.grammar import check_mode
from agentrl.serve.batcher import Batcher, Job, partial_text
from agentrl.serve.protocol import (
    ChatRequest,
    RequestError,
    choice_message,
    error_body,
    sampling_of,
    to_chat_messages,
)
from agentrl.serve.record import SESSION_HEADER, Recorder, RewardError, parse_reward

TOOL_TAG = "<tool_call>"
DEFAULT_MAX_TOKENS = 512


def create_app(engine: Any, model_name: str, *, capacity: int, slots: int = 8,
               api_key: str | None = None, session: Any = None,
               recorder: Recorder | None = None, any_model: bool = False,
               constrained: str = "off") -> FastAPI:  # fmt: skip
    """The app serving ``engine``'s model as ``model_name``; ``session``: a decode session to
    use (tests), ``recorder``: record sessions and rewards, ``any_model``: serve any model name
    (a trainer's server), ``constrained="tool_calls"``: auto replies constrained too."""
    check_mode(constrained)
    batcher = Batcher(engine, capacity=capacity, slots=slots, session=session)
    tok = engine.tokenizer

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        # request handlers wait on their jobs in threads: let many wait at once
        anyio.to_thread.current_default_thread_limiter().total_tokens = 256
        yield
        batcher.close()

    app = FastAPI(title="agentrl serve", version="1", lifespan=lifespan)
    app.state.batcher, app.state.model_name = batcher, model_name
    app.state.recorder = recorder

    _add_auth(app, api_key)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        loc = ".".join(str(x) for x in first.get("loc", ()) if x != "body") or None
        msg = first.get("msg", "invalid request")
        return JSONResponse(error_body(f"{loc}: {msg}" if loc else msg, param=loc), 400)

    @app.exception_handler(RequestError)
    async def _bad(_request: Request, err: RequestError) -> JSONResponse:
        return JSONResponse(error_body(str(err), err.kind, err.param), err.status)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "live": len(batcher.live),
                "slots": batcher.slots, "context": capacity, **batcher.stats}  # fmt: skip

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        card = {"id": model_name, "object": "model", "created": 0, "owned_by": "agentrl"}
        return {"object": "list", "data": [card]}

    _add_reward_route(app, recorder)

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest, request: Request):
        if req.model != model_name and not any_model:
            raise RequestError(f"model {req.model!r} is not served here; this server serves "
                               f"{model_name!r}", "model", 404, "not_found_error")  # fmt: skip
        messages, tools = _messages_and_tools(req)
        grammar = _grammar_of(req, tools, constrained)  # checked before anything is queued
        session = request.headers.get(SESSION_HEADER) or req.user
        prompt, continued = _encode(tok, messages, tools, recorder, session)
        max_new = _max_new(req, len(prompt), capacity, recorder)
        stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        seed = req.seed if req.seed is not None else random.getrandbits(31)
        sampling = (recorder.sampling if recorder is not None and recorder.sampling
                    else sampling_of(req))  # fmt: skip
        jobs = [batcher.submit(job) for job in
                _jobs(engine, grammar, req.n, prompt, max_new, sampling, seed, stop)]  # fmt: skip
        rid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())

        def record() -> None:
            if recorder is not None:
                outs = [(j.sample, j.text, _reply(j), _finish_reason(j))
                        for j in jobs if j.error is None and j.sample]  # fmt: skip
                recorder.record(session, rid, messages, tools, prompt, continued, outs)

        if req.stream:
            events = _stream(tok, jobs, rid, created, model_name, record)
            return StreamingResponse(events, media_type="text/event-stream")
        for job in jobs:
            job.done.wait()
        record()
        return _completion(jobs, rid, created, model_name, len(prompt))

    return app


def _add_auth(app: FastAPI, api_key: str | None) -> None:
    """With ``api_key``, every ``/v1/`` route needs ``Authorization: Bearer KEY`` (else 401)."""

    @app.middleware("http")
    async def _auth(request: Request, call_next):
        given = request.headers.get("authorization", "")
        if api_key and request.url.path.startswith("/v1/") and given != f"Bearer {api_key}":
            body = error_body("invalid API key (send 'Authorization: Bearer KEY')",
                              "authentication_error", code="invalid_api_key")  # fmt: skip
            return JSONResponse(body, status_code=401)
        return await call_next(request)


def _add_reward_route(app: FastAPI, recorder: Recorder | None) -> None:
    """``POST /v1/agentrl/reward``: a session's reward (a 404 when recording is off)."""

    @app.post("/v1/agentrl/reward")
    async def reward(request: Request) -> dict[str, Any]:
        if recorder is None:
            raise RequestError("recording is off: rewards need a server started with --record "
                               "DIR", None, 404, "not_found_error")  # fmt: skip
        try:
            body = await request.json()
        except ValueError as err:
            raise RequestError(f"the body is not valid JSON: {err}", None) from err
        try:
            entry = recorder.reward(*parse_reward(body))
        except RewardError as err:
            kind = "not_found_error" if err.status == 404 else "invalid_request_error"
            raise RequestError(str(err), err.param, err.status, kind) from err
        return {"object": "agentrl.reward", **entry}


def _max_new(req: ChatRequest, prompt_len: int, capacity: int, recorder: Recorder | None) -> int:
    """The reply's token budget: the request's, else what the context leaves (at most
    ``DEFAULT_MAX_TOKENS``), within a recorder's cap; a 400 when it does not fit."""
    budget = req.max_completion_tokens or req.max_tokens
    room = capacity - prompt_len
    if room < 1:
        raise RequestError(f"the prompt is {prompt_len} tokens, over the context of "
                           f"{capacity}", "messages")  # fmt: skip
    if budget is not None and budget > room:
        raise RequestError(f"max_tokens {budget} is beyond the context: the prompt takes "
                           f"{prompt_len} of {capacity} tokens, {room} are left",
                           "max_tokens")  # fmt: skip
    max_new = budget or min(room, DEFAULT_MAX_TOKENS)
    if recorder is not None and recorder.max_new:
        max_new = min(max_new, recorder.max_new)
    return max_new


def _messages_and_tools(req: ChatRequest) -> tuple[list[dict[str, Any]], Any]:
    """The request's chat messages and the tools to render (none with tool_choice none)."""
    choice = req.tool_choice
    named = isinstance(choice, dict)
    if choice not in (None, "auto", "none", "required") and not named:
        raise RequestError("tool_choice must be 'auto', 'none', 'required' or "
                           f"{{'type': 'function', 'function': {{'name': ...}}}}, got {choice!r}",
                           "tool_choice")  # fmt: skip
    if (choice == "required" or named) and not req.tools:
        raise RequestError(f"tool_choice {choice!r} needs tools", "tool_choice")
    tools = None if choice == "none" or not req.tools else req.tools
    return to_chat_messages(req.messages), tools


def _grammar_of(req: ChatRequest, tools: Any, constrained: str) -> tuple[list, bool] | None:
    """(tool schemas, required) the reply's grammar allows, or None for a free reply:
    ``required`` = any offered tool, a named function = that tool alone, ``auto`` = calls
    well-formed when the server constrains."""
    choice = req.tool_choice
    if not tools:
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        chosen = [t for t in tools if (t.get("function") or t).get("name") == name]
        if not chosen:
            raise RequestError(f"tool_choice names {name!r}, which is not among the tools",
                               "tool_choice")  # fmt: skip
        return chosen, True
    if choice == "required":
        return list(tools), True
    return (list(tools), False) if constrained == "tool_calls" else None


def _jobs(engine: Any, grammar: tuple[list, bool] | None, n: int, prompt: list[int],
          max_new: int, sampling: tuple, seed: int,
          stop: tuple[str, ...]) -> list[Job]:  # fmt: skip
    """The request's ``n`` jobs, seeds ``seed`` + i, each with its own grammar state."""
    return [Job(prompt, max_new, sampling, seed + i, stop,
                constraint=_constraint(engine, grammar)) for i in range(n)]  # fmt: skip


def _constraint(engine: Any, grammar: tuple[list, bool] | None) -> Any:
    """A fresh constraint for one job (each of ``n`` choices has its own grammar state)."""
    if grammar is None:
        return None
    try:
        return engine.tool_call_constraint(grammar[0], required=grammar[1])
    except (ValueError, KeyError, TypeError) as err:  # a schema the grammar cannot hold
        raise RequestError(f"the tools cannot be turned into a call grammar: {err}",
                           "tools") from err  # fmt: skip


def _encode(tok: Any, messages: list[dict[str, Any]], tools: Any, recorder: Recorder | None,
            session: str | None) -> tuple[list[int], bool]:  # fmt: skip
    """The prompt ids through the chat template, or the session's continuation with a
    recorder; and whether they continue the session's last turn."""
    try:
        if recorder is not None:
            return recorder.prompt(session, messages, tools)
        return encode_prompt(tok, messages, tools), False
    except Exception as err:  # noqa: BLE001 - a template error is the request's fault
        raise RequestError(f"the chat template cannot render these messages: {err}",
                           "messages") from err  # fmt: skip


def _reply(job: Job) -> dict[str, Any]:
    """A job's reply as a client sends it back, in chat format (what a session extends)."""
    return to_chat_messages([choice_message(job.text)[0]])[0]


def _finish_reason(job: Job) -> str:
    has_calls = choice_message(job.text)[1]
    return "tool_calls" if has_calls and job.finish_reason == "stop" else job.finish_reason


def _choice(job: Job, index: int) -> tuple[dict[str, Any], str]:
    if job.error is not None:
        raise RequestError(job.error, None, 503, "server_error")
    message = choice_message(job.text)[0]
    reason = _finish_reason(job)
    return {"index": index, "message": message, "finish_reason": reason}, reason


def _completion(jobs: list[Job], rid: str, created: int, model: str, prompt_tokens: int):
    choices = [_choice(job, i)[0] for i, job in enumerate(jobs)]
    completion = sum(len(job.sample.ids) if job.sample else 0 for job in jobs)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
             "total_tokens": prompt_tokens + completion}  # fmt: skip
    return {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "choices": choices, "usage": usage}  # fmt: skip


def streamable_content(text: str) -> str:
    """The part of a growing turn that is plain content: before any ``<tool_call>``, and not
    a tail that may be the start of one."""
    cut = text.find(TOOL_TAG)
    if cut >= 0:
        return text[:cut]
    for k in range(min(len(TOOL_TAG) - 1, len(text)), 0, -1):
        if TOOL_TAG.startswith(text[-k:]):
            return text[:-k]
    return text.rstrip("\ufffd")  # half of a multi-byte character


def _stream(tok: Any, jobs: list[Job], rid: str, created: int, model: str,
            on_done: Any = None) -> Iterator[str]:  # fmt: skip
    """Server-sent events of ``jobs``; ``on_done()`` runs before the final ``[DONE]``."""

    def event(index: int, delta: dict[str, Any], reason: str | None = None) -> str:
        chunk = {"id": rid, "object": "chat.completion.chunk", "created": created,
                 "model": model, "choices": [{"index": index, "delta": delta,
                                              "finish_reason": reason}]}  # fmt: skip
        return f"data: {json.dumps(chunk)}\n\n"

    for i in range(len(jobs)):
        yield event(i, {"role": "assistant", "content": ""})
    sent, open_ = [0] * len(jobs), set(range(len(jobs)))
    while open_:
        jobs[min(open_)].done.wait(timeout=0.02)
        for i in sorted(open_):
            job = jobs[i]
            finished = job.done.is_set()
            text = streamable_content(partial_text(tok, job))
            if len(text) > sent[i]:
                yield event(i, {"content": text[sent[i] :]})
                sent[i] = len(text)
            if not finished:
                continue
            open_.discard(i)
            if job.error is not None:
                yield f"data: {json.dumps(error_body(job.error, 'server_error'))}\n\n"
                continue
            choice, reason = _choice(job, i)
            message = choice["message"]
            for j, call in enumerate(message.get("tool_calls") or []):
                yield event(i, {"tool_calls": [{"index": j, **call}]})
            yield event(i, {}, reason)
    if on_done is not None:
        on_done()
    yield "data: [DONE]\n\n"
