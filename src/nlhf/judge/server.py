"""A judge over HTTP: the app ``nlhf judge serve`` runs, batching concurrent requests.

    app = create_app(judge, spec="runs/rm/model", token="", max_chars=8192)   # nlhf.web.serve

    GET  /info     {"kind": "score" | "pairwise", "scale": s, "judge": spec, "batches": n}
    POST /compare  {"prompts": [...], "a": [...], "b": [...]}  → {"p": [P(a ≻ b), ...]}
    POST /scores   {"prompts": [...], "completions": [...]}     → {"scores": [...]} (score judges)

Requests that arrive while the judge is busy wait in a queue; the worker thread takes all of
them (up to ``max_batch`` comparisons) and makes one judge call per kind; if that call fails,
it asks again one request at a time, so only a request the judge fails on gets 500.  Refusals,
in order: with a ``token``, 401 without ``Authorization: Bearer <token>``, before any of the
body is read (wrong tokens slow their address down: 429, nlhf.web.Throttle); 413 for a body
past what ``max(max_batch, 256)`` comparisons of full-length texts need; 422 for a malformed
body; 413 for a text longer than ``max_chars``; 503 when no answer came within ``deadline``
seconds (a request the worker has not started by then is dropped).  Clients:
nlhf.models.judges.remote.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from nlhf.models.judges.base import ScoreJudge
from nlhf.web import BodyLimit, Throttle

log = logging.getLogger(__name__)

MAX_ITEMS_PER_REQUEST = 4096
CHARS_PER_TOKEN = 16  # ``nlhf judge serve``: max_chars = CHARS_PER_TOKEN × judge_max_length
BYTES_PER_CHAR = 4  # UTF-8's widest

router = APIRouter()
Texts = Annotated[list[str], Field(max_length=MAX_ITEMS_PER_REQUEST)]


class CompareIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: Texts
    a: Texts
    b: Texts


class ScoresIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: Texts
    completions: Texts


@dataclass
class _Job:
    kind: str  # compare | scores
    columns: tuple[list[str], ...]
    future: Future


class Batcher:
    """One worker thread that runs the judge on everything waiting, in one call per kind."""

    def __init__(self, judge: Any, max_batch: int = 256) -> None:
        self.judge, self.max_batch, self.batches = judge, max_batch, 0
        self._queue: queue.Queue[_Job] = queue.Queue()
        threading.Thread(target=self._work, name="judge-batcher", daemon=True).start()

    def submit(self, kind: str, *columns: list[str]) -> Future:
        """The values for one request; cancelling the future before it starts drops it."""
        job = _Job(kind, columns, Future())
        self._queue.put(job)
        return job.future

    def _work(self) -> None:
        while True:
            jobs = [self._queue.get()]
            while sum(len(j.columns[0]) for j in jobs) < self.max_batch and self._queue.qsize():
                jobs.append(self._queue.get())
            jobs = [j for j in jobs if j.future.set_running_or_notify_cancel()]  # past deadline
            for kind in ("compare", "scores"):
                group = [j for j in jobs if j.kind == kind]
                if group:
                    self._run(kind, group)

    def _run(self, kind: str, group: list[_Job]) -> None:
        merged = [
            [text for job in group for text in job.columns[i]] for i in range(len(group[0].columns))
        ]
        try:
            values = self.judge(*merged) if kind == "compare" else self.judge.scores(*merged)
            values = values.float().cpu().tolist()
        except Exception as exc:  # the request fails, the server goes on
            if len(group) > 1:  # ask again one by one: only the failing request fails
                for job in group:
                    self._run(kind, [job])
                return
            log.exception("judge failed on a request of %d", len(merged[0]))
            group[0].future.set_exception(exc)
            return
        self.batches += 1
        start = 0
        for job in group:
            n = len(job.columns[0])
            job.future.set_result(values[start : start + n])
            start += n


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status, headers=headers)


class NeedToken:
    """ASGI middleware: 401 without ``Authorization: Bearer <token>``, before the body is read;
    a wrong token is logged and counted per address, and an address that keeps sending wrong
    ones gets 429 with ``Retry-After`` for a while."""

    def __init__(self, app: Any, *, token: str, throttle: Throttle) -> None:
        self.app, self.expected, self.throttle = app, f"Bearer {token}".encode(), throttle

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope["client"][0] if scope.get("client") else "unknown"
        sent = dict(scope["headers"]).get(b"authorization")
        wait = math.ceil(self.throttle.wait(client))
        if wait > 0:
            message = f"too many wrong tokens from {client}: try again in {wait} s"
            response = _error(429, message, {"Retry-After": str(wait)})
        elif sent is not None and hmac.compare_digest(sent, self.expected):
            self.throttle.succeeded(client)
            await self.app(scope, receive, send)
            return
        else:
            if sent is not None:
                failures = self.throttle.failed(client)
                log.warning("nlhf judge: wrong token from %s (%d in a row)", client, failures)
            message = "send 'Authorization: Bearer <token>' with this server's token"
            response = _error(401, message, {"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


async def _answer(request: Request, kind: str, body: BaseModel) -> Response:
    state = request.app.state
    columns = dict(body)
    if len({len(texts) for texts in columns.values()}) > 1:
        lengths = ", ".join(f"{name} {len(texts)}" for name, texts in columns.items())
        return _error(422, f"malformed request: lists of different lengths ({lengths})")
    for name, texts in columns.items():
        for i, text in enumerate(texts):
            if len(text) > state.max_chars:
                return _error(
                    413, f"{name}[{i}] has {len(text)} characters; this judge reads at most "
                    f"{state.max_chars} (its judge_max_length × {CHARS_PER_TOKEN})"
                )  # fmt: skip
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    return _error(422, f"{name}[{i}] is not valid Unicode (a lone surrogate)")
    future = state.batcher.submit(kind, *columns.values())
    try:
        values = await asyncio.wait_for(asyncio.wrap_future(future), state.deadline)
    except TimeoutError:
        message = f"no answer within {state.deadline:g} s: the judge is busy; try again"
        return _error(503, message, {"Retry-After": "1"})
    except Exception as exc:
        return _error(500, f"the judge failed: {type(exc).__name__}: {exc}"[:500])
    return JSONResponse({"p" if kind == "compare" else "scores": values})


@router.get("/info")
async def info(request: Request) -> dict[str, Any]:
    batcher = request.app.state.batcher
    is_score = isinstance(batcher.judge, ScoreJudge)
    return {
        "kind": "score" if is_score else "pairwise",
        "scale": batcher.judge.scale if is_score else None,
        "judge": request.app.state.spec,
        "batches": batcher.batches,
    }


@router.post("/compare")
async def compare(request: Request, body: CompareIn) -> Response:
    return await _answer(request, "compare", body)


@router.post("/scores")
async def scores(request: Request, body: ScoresIn) -> Response:
    if not isinstance(request.app.state.batcher.judge, ScoreJudge):
        return _error(400, "this judge compares pairs and gives no scores: POST /compare")
    return await _answer(request, "scores", body)


async def _malformed(request: Request, exc: RequestValidationError) -> Response:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
        for e in exc.errors()
    )
    return _error(422, f"malformed request: {problems}"[:1000])


def create_app(
    judge: Any,
    spec: str = "",
    token: str = "",
    max_batch: int = 256,
    max_chars: int = CHARS_PER_TOKEN * 512,
    deadline: float = 120.0,
) -> FastAPI:
    """The judge server's ASGI app (``app.state.batcher`` runs the judge)."""
    app = FastAPI(title="nlhf judge", docs_url=None, redoc_url=None, openapi_url=None,
                  routes=router.routes)  # fmt: skip
    app.state.batcher, app.state.spec = Batcher(judge, max_batch), spec
    app.state.max_chars, app.state.deadline = max_chars, deadline
    app.add_exception_handler(RequestValidationError, _malformed)
    max_bytes = 3 * max(max_batch, 256) * max_chars * BYTES_PER_CHAR
    app.add_middleware(BodyLimit, max_bytes=max_bytes, refuse=lambda r, s, m: _error(s, m))
    if token:  # outermost: the token is checked before the body is read
        app.add_middleware(NeedToken, token=token, throttle=Throttle())
    return app
