"""Serving the app with uvicorn, on a socket bound up front (so port 0 means "any free port").

from nlhf.label.server import bind, serve, running_server
sock = bind("127.0.0.1", 8765)
serve(app, sock)                                  # blocks until Ctrl-C / SIGTERM

with running_server(app) as url:                  # tests, screenshots: a background thread
    httpx.get(url + "/api/session")
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from nlhf.errors import UserError


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


def _server(app: Any, log_level: str) -> uvicorn.Server:
    config = uvicorn.Config(
        app, log_level=log_level, lifespan="off", timeout_graceful_shutdown=5, access_log=False
    )
    return uvicorn.Server(config)


def serve(app: Any, sock: socket.socket, log_level: str = "warning") -> None:
    """Serve ``app`` on ``sock`` until interrupted."""
    _server(app, log_level).run(sockets=[sock])


@contextmanager
def running_server(
    app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"
) -> Iterator[str]:
    """Serve ``app`` from a background thread; yields its base URL, stops on exit."""
    sock = bind(host, port)
    server = _server(app, log_level)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the labeling server did not start")
        time.sleep(0.01)
    try:
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
