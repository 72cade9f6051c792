"""A judge over HTTP: the app ``nlhf judge serve`` runs, batching concurrent requests.

    from nlhf.judge.server import create_app
    app = create_app(judge, spec="runs/rm/model", token="")   # served with nlhf.label.server

    GET  /info     {"kind": "score" | "pairwise", "scale": s, "judge": spec, "batches": n}
    POST /compare  {"prompts": [...], "a": [...], "b": [...]}  → {"p": [P(a ≻ b), ...]}
    POST /scores   {"prompts": [...], "completions": [...]}     → {"scores": [...]} (score judges)

Requests that arrive while the judge is busy wait in a queue; the worker thread takes all of
them (up to ``max_items`` comparisons), makes one judge call per kind and answers each its
share, so several trainers (or GPUs) keep one judge model busy.  With a ``token`` every
request needs ``Authorization: Bearer <token>`` (401 otherwise).  A malformed request gets a
4xx naming what is wrong (422: lists of different lengths, text that is not Unicode; 413: a
body past the limit); a judge that fails on a request answers that request 500 and the server
goes on serving.  Clients: nlhf.models.judges.remote.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from nlhf.label.limits import BodyLimit
from nlhf.models.judges.base import ScoreJudge

log = logging.getLogger(__name__)

MAX_ITEMS_PER_REQUEST = 4096
MAX_BODY_BYTES = 64 * 1024 * 1024


def _unicode(texts: list[str], name: str) -> list[str]:
    for i, text in enumerate(texts):
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"{name}[{i}] is not valid Unicode (a lone surrogate)") from None
    return texts


class CompareIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(max_length=MAX_ITEMS_PER_REQUEST)
    a: list[str] = Field(max_length=MAX_ITEMS_PER_REQUEST)
    b: list[str] = Field(max_length=MAX_ITEMS_PER_REQUEST)

    @model_validator(mode="after")
    def _same_lengths(self) -> CompareIn:
        if not len(self.prompts) == len(self.a) == len(self.b):
            raise ValueError(
                f"prompts, a and b need one entry each per comparison; got {len(self.prompts)}, "
                f"{len(self.a)} and {len(self.b)}"
            )
        for name in ("prompts", "a", "b"):
            _unicode(getattr(self, name), name)
        return self


class ScoresIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(max_length=MAX_ITEMS_PER_REQUEST)
    completions: list[str] = Field(max_length=MAX_ITEMS_PER_REQUEST)

    @model_validator(mode="after")
    def _same_lengths(self) -> ScoresIn:
        if len(self.prompts) != len(self.completions):
            raise ValueError(
                f"prompts and completions differ in length: {len(self.prompts)} and "
                f"{len(self.completions)}"
            )
        _unicode(self.prompts, "prompts")
        _unicode(self.completions, "completions")
        return self


@dataclass
class _Job:
    kind: str  # compare | scores
    columns: tuple[list[str], ...]
    future: Future


class Batcher:
    """One worker thread that runs the judge on everything waiting, in one call per kind."""

    def __init__(self, judge: Any, max_items: int = 256) -> None:
        self.judge, self.max_items, self.batches = judge, max_items, 0
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="judge-batcher", daemon=True)
        self._thread.start()

    def submit(self, kind: str, *columns: list[str]) -> Future:
        job = _Job(kind, columns, Future())
        self._queue.put(job)
        return job.future

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            jobs, size = [job], len(job.columns[0])
            while size < self.max_items:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                jobs.append(more)
                size += len(more.columns[0])
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
        except Exception as exc:  # the requests fail, the server goes on
            log.exception("judge failed on a batch of %d", len(merged[0]))
            for job in group:
                job.future.set_exception(exc)
            return
        self.batches += 1
        start = 0
        for job in group:
            n = len(job.columns[0])
            job.future.set_result(values[start : start + n])
            start += n


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status)


def create_app(judge: Any, spec: str = "", token: str = "", max_items: int = 256) -> FastAPI:
    """The judge server's ASGI app (``app.state.batcher`` runs the judge)."""
    app = FastAPI(title="nlhf judge", docs_url=None, redoc_url=None, openapi_url=None)
    batcher = Batcher(judge, max_items)
    app.state.batcher = batcher
    is_score = isinstance(judge, ScoreJudge)

    @app.middleware("http")
    async def need_token(request: Request, call_next: Any) -> Response:
        if token:
            sent = request.headers.get("authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
                return _error(401, "send 'Authorization: Bearer <token>' with this server's token")
        return await call_next(request)

    async def answer(kind: str, *columns: list[str]) -> list[float]:
        return await asyncio.wrap_future(batcher.submit(kind, *columns))

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return {
            "kind": "score" if is_score else "pairwise",
            "scale": judge.scale if is_score else None,
            "judge": spec,
            "batches": batcher.batches,
        }

    @app.post("/compare")
    async def compare(body: CompareIn) -> Response:
        try:
            return JSONResponse({"p": await answer("compare", body.prompts, body.a, body.b)})
        except Exception as exc:
            return _error(500, f"the judge failed: {type(exc).__name__}: {exc}"[:500])

    @app.post("/scores")
    async def scores(body: ScoresIn) -> Response:
        if not is_score:
            return _error(400, "this judge compares pairs and gives no scores: POST /compare")
        try:
            return JSONResponse({"scores": await answer("scores", body.prompts, body.completions)})
        except Exception as exc:
            return _error(500, f"the judge failed: {type(exc).__name__}: {exc}"[:500])

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
            for e in exc.errors()
        )
        return _error(422, f"malformed request: {problems}"[:1000])

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _error(exc.status_code, str(exc.detail))

    def refuse(request: Request, status: int, message: str) -> Response:
        return _error(status, message)

    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES, refuse=refuse)
    return app
