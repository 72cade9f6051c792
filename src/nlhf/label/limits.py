"""Limits the labeling app puts on a request before any route runs.

    app.add_middleware(BodyLimit, max_bytes=64 * 1024, refuse=error_response)
    throttle = Throttle()                    # wrong tokens per client, with back-off
    wait = throttle.wait(client)             # seconds before this client may try again (0: now)
    throttle.failed(client); throttle.succeeded(client)

``BodyLimit`` (pure ASGI) counts the bytes a request body actually has, chunked or not, and
answers 413 as soon as they pass the limit, without reading the rest; a smaller body is
handed on to the app as read.  A ``Content-Length`` that is not a plain number is a 400.

``Throttle``: the first ``free`` wrong tokens from a client cost nothing; each further one
shuts the client out for twice as long as the one before (1 s, 2 s, 4 s, … at most
``max_seconds``), during which every request of theirs that carries a token is refused with
429 and ``Retry-After``.  A right token clears the count.  Clients are told apart by their
address (behind a reverse proxy they share one: put the limit in the proxy there).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class BodyLimit:
    """ASGI middleware: refuse request bodies longer than ``max_bytes`` (413)."""

    def __init__(
        self, app: Any, *, max_bytes: int, refuse: Callable[[Request, int, str], Response]
    ) -> None:
        self.app, self.max_bytes, self.refuse = app, max_bytes, refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not (declared.isascii() and declared.isdigit()):
                await self.refuse(Request(scope), 400, "Bad Content-Length header.")(
                    scope, receive, send
                )
                return
            if int(declared) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
        await self.app(scope, _replay(bytes(body), receive), send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = self.refuse(Request(scope), 413, "Request body too large.")
        response.headers["Connection"] = "close"
        await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields the body already read, then waits as the original does."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class Throttle:
    """Wrong-token counts per client with exponential back-off (see the module doc)."""

    def __init__(self, free: int = 5, max_seconds: float = 300.0, clients: int = 10_000) -> None:
        self.free, self.max_seconds, self.clients = free, max_seconds, clients
        self._state: OrderedDict[str, tuple[int, float]] = OrderedDict()  # failures, until
        self._lock = threading.Lock()

    def wait(self, client: str) -> float:
        """Seconds before ``client`` may send a token again (0: now)."""
        with self._lock:
            _, until = self._state.get(client, (0, 0.0))
        return max(0.0, until - time.monotonic())

    def failed(self, client: str) -> int:
        """Count a wrong token from ``client``; returns their failures in a row."""
        with self._lock:
            failures = self._state.pop(client, (0, 0.0))[0] + 1
            over = failures - self.free
            pause = min(self.max_seconds, 2.0 ** (over - 1)) if over > 0 else 0.0
            self._state[client] = (failures, time.monotonic() + pause)
            while len(self._state) > self.clients:
                self._state.popitem(last=False)
        return failures

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._state.pop(client, None)
