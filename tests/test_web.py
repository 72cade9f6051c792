"""nlhf.web, what both servers share: loopback names, and on a real uvicorn server, who a
client is (the address it connects from, unless its proxy is named) and the read timeout on a
request's head and body."""

import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from nlhf.web import READ_SECONDS, BodyLimit, is_loopback, running_server


def test_loopback_is_what_only_this_machine_can_reach():
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST."):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "10.0.0.1", "::", "example.com", "localhost.example.com", ""):
        assert not is_loopback(host), host


async def echo(request: Request) -> JSONResponse:
    body = await request.body()
    return JSONResponse({"client": request.client.host, "bytes": len(body)})


def app() -> Starlette:
    refuse = lambda request, status, message: PlainTextResponse(message, status)  # noqa: E731
    web = Starlette(routes=[Route("/", echo, methods=["GET", "POST"])])
    web.add_middleware(BodyLimit, max_bytes=1000, refuse=refuse)
    return web


def test_a_client_is_its_own_address_unless_its_proxy_is_named():
    forged = {"X-Forwarded-For": "10.9.8.7"}
    with running_server(app()) as url:
        assert httpx.get(url, headers=forged).json()["client"] == "127.0.0.1"
        assert httpx.post(url, content=b"x" * 1000).json()["bytes"] == 1000
        assert httpx.post(url, content=b"x" * 1001).status_code == 413
    with running_server(app(), forwarded_allow_ips="127.0.0.1") as url:
        assert httpx.get(url, headers=forged).json()["client"] == "10.9.8.7"


def closed_or_answered(sock: socket.socket, seconds: float) -> bytes:
    """What the server sends before it closes ``sock`` (b"" for a bare close)."""
    sock.settimeout(seconds)
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return received


@pytest.mark.slow
def test_a_stalled_head_is_closed_and_a_stalled_body_gets_408():
    with running_server(app()) as url:
        where = urlsplit(url)
        head = socket.create_connection((where.hostname, where.port))
        body = socket.create_connection((where.hostname, where.port))
        start = time.monotonic()
        head.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")  # the head never ends
        body.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"y" * 10)
        answer = closed_or_answered(body, READ_SECONDS + 20)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert closed_or_answered(head, READ_SECONDS + 20) == b""
        assert time.monotonic() - start < READ_SECONDS + 20
        head.close()
        body.close()
