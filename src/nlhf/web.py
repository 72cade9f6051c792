"""What the two web servers (``nlhf label serve``, ``nlhf judge serve``) share: the listening
socket, uvicorn, and the limits put on a request before any route runs.

    sock = bind("127.0.0.1", 0); print(url_of(sock)); serve(app, sock)   # blocks
    with running_server(app) as url: httpx.get(url + "/info")            # a background thread
    app.add_middleware(BodyLimit, max_bytes=64 * 1024, refuse=error_response)
    throttle = Throttle(); throttle.wait(client); throttle.failed(client)

``BodyLimit`` (pure ASGI) counts the bytes a body actually has, chunked or not: past
``max_bytes`` it answers 413 without reading the rest, and a body that stalls for
``READ_SECONDS`` gets 408; both close the connection.  A ``Content-Length`` that is not plain
digits is a 400.  A connection whose request head is not in within ``READ_SECONDS`` is closed.
``Throttle``: the first ``free`` wrong tokens from an address cost nothing; each further one
shuts it out twice as long as the one before (1 s, 2 s, … at most ``max_seconds``).
``X-Forwarded-For`` is trusted only from the addresses in ``forwarded_allow_ips`` (uvicorn
would trust 127.0.0.1); otherwise a client is the address it connects from.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from starlette.requests import Request
from starlette.responses import Response
from uvicorn.protocols.http.h11_impl import H11Protocol

from nlhf.errors import UserError

READ_SECONDS = 5.0  # the longest a request head may take, and a body may pause
LOOPBACK_NAMES = ("localhost", "localhost.")

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``: addresses only this machine can reach."""
    host = host.strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BodyLimit:
    """ASGI middleware: refuse bodies longer than ``max_bytes`` (413) or stalled (408)."""

    def __init__(
        self, app: Any, *, max_bytes: int, refuse: Callable[[Request, int, str], Response]
    ) -> None:
        self.app, self.max_bytes, self.refuse = app, max_bytes, refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not (declared.isascii() and declared.isdigit()):
            await self.refuse(Request(scope), 400, "Bad Content-Length header.")(
                scope, receive, send
            )
            return
        too_large = len(declared) > 18 or int(declared) > self.max_bytes
        body, more = bytearray(), not too_large
        while more:
            try:
                message = await asyncio.wait_for(receive(), READ_SECONDS)
            except TimeoutError:
                await self._close(scope, receive, send, 408, "The request body stalled.")
                return
            if message["type"] != "http.request":  # the client went away
                return
            body += message.get("body", b"")
            more = message.get("more_body", False) and len(body) <= self.max_bytes
        if too_large or len(body) > self.max_bytes:
            await self._close(scope, receive, send, 413, "Request body too large.")
            return
        await self.app(scope, _replay(bytes(body), receive), send)

    async def _close(self, scope: Scope, receive: Receive, send: Send, status: int, why: str):
        response = self.refuse(Request(scope), status, why)
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


class PortError(UserError, OSError):
    """An address or port that cannot be listened on (in use, not this machine's, …)."""


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio enables TCP_NODELAY on accepted connections only
    # for sockets that say they are TCP; without it every response stalls ~40 ms (Nagle
    # against delayed ACKs).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        raise PortError(f"--host {host} --port {port}: cannot listen there: {reason}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"
    return f"http://{shown}:{port}"


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose next request head is not in within
    ``READ_SECONDS`` (uvicorn's own timer stops at the first byte)."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._head_deadline()

    def on_response_complete(self) -> None:
        self._head_deadline()  # before a pipelined request can start the next cycle
        super().on_response_complete()

    def _head_deadline(self) -> None:
        def late(cycle: Any = self.cycle) -> None:
            if self.cycle is cycle and not self.transport.is_closing():  # no new head since
                self.transport.close()

        self.loop.call_later(READ_SECONDS, late)


def _server(app: Any, log_level: str, forwarded_allow_ips: str) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        http=_Protocol,
        log_level=log_level,
        lifespan="off",
        timeout_graceful_shutdown=5,
        access_log=False,
        proxy_headers=bool(forwarded_allow_ips),
        forwarded_allow_ips=forwarded_allow_ips or None,
    )
    return uvicorn.Server(config)


def serve(
    app: Any, sock: socket.socket, log_level: str = "warning", forwarded_allow_ips: str = ""
) -> None:
    """Serve ``app`` on ``sock`` until interrupted."""
    _server(app, log_level, forwarded_allow_ips).run(sockets=[sock])


@contextmanager
def running_server(app: Any, forwarded_allow_ips: str = "") -> Iterator[str]:
    """Serve ``app`` on a free loopback port from a background thread; yields its base URL."""
    sock = bind("127.0.0.1", 0)
    server = _server(app, "warning", forwarded_allow_ips)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    try:
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
