"""The labeling app's Guard on its own: admission, identity, roles, CSRF and sessions.

Requests are bare Starlette ``Request`` objects built from an ASGI scope; no app, no routes.
"""

import asyncio

import pytest
from starlette.requests import Request

from nlhf.label.errors import HTTPError
from nlhf.label.security import COOKIE, Guard
from nlhf.label.store import LabelStore


@pytest.fixture
def store(tmp_path):
    s = LabelStore(str(tmp_path / "labels.sqlite"))
    yield s
    s.close()


def request(method="GET", path="/", headers=None, cookie=None):
    raw = {"host": "127.0.0.1:8765", **(headers or {})}
    if cookie is not None:
        raw["cookie"] = f"{COOKIE}={cookie}"
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": b"",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in raw.items()],
    }
    return Request(scope)


def admitted(guard, req):
    """The request's identity once the guard admits it (fails the test when refused)."""
    refused = asyncio.run(guard.admit(req))
    assert refused is None, (refused.status, refused.message)
    return guard.identity(req)


def refusal(guard, req):
    refused = asyncio.run(guard.admit(req))
    assert refused is not None, "admitted"
    return refused.status, refused.message


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def test_token_mode_anonymous_labeler_and_admin(store):
    ann, boss = store.create_token("ann"), store.create_token("boss", admin=True)
    guard = Guard(store, require_tokens=True)

    status, message = refusal(guard, request())
    assert status == 401 and "token is required" in message
    assert refusal(guard, request(headers=bearer("nope"))) == (401, "Unknown or revoked token.")
    assert refusal(guard, request(headers={"Authorization": "Basic eA=="}))[0] == 401
    anonymous = admitted(guard, request(path="/login"))  # the sign-in link needs no token
    assert anonymous.labeler is None and not anonymous.admin
    with pytest.raises(HTTPError) as err:
        guard.need_labeler(anonymous)
    assert err.value.status == 401

    labeler = admitted(guard, request(headers=bearer(ann)))
    assert labeler.bearer and labeler.labeler.name == "ann" and not labeler.admin
    assert guard.need_labeler(labeler).name == "ann"
    with pytest.raises(HTTPError) as err:
        guard.need_admin(labeler)
    assert err.value.status == 403

    admin = admitted(guard, request(headers=bearer(boss)))
    assert admin.admin and guard.need_admin(admin) is admin


def test_open_mode_admin_for_every_local_visitor_but_labelling_needs_a_name(store):
    guard = Guard(store)
    anonymous = admitted(guard, request())
    assert anonymous.labeler is None and anonymous.admin
    assert guard.need_admin(anonymous) is anonymous
    with pytest.raises(HTTPError) as err:
        guard.need_labeler(anonymous)
    assert err.value.status == 401
    _, cookie = guard.new_session(store.labeler_for_name("ann"))
    signed_in = admitted(guard, request(cookie=cookie))
    assert signed_in.labeler.name == "ann" and signed_in.admin and not signed_in.bearer
    for host in ("evil.example", "10.0.0.5:8765"):
        assert refusal(guard, request(headers={"host": host}))[0] == 403
    assert admitted(guard, request(headers={"host": "[::1]:8765"})).labeler is None


def test_csrf_token_must_belong_to_the_session(store):
    guard = Guard(store)
    session, cookie = guard.new_session(store.labeler_for_name("ann"))
    other, _ = guard.new_session(store.labeler_for_name("bob"))
    token = guard.csrf_token(session)

    def check(sent=None, headers=None):
        req = request("POST", "/submit", headers=headers, cookie=cookie)
        admitted(guard, req)
        guard.check_csrf(req, sent)

    check(token)  # form field
    check(headers={"X-CSRF-Token": token})  # header
    for sent in (None, "", "0" * 40, guard.csrf_token(other), token[:-1]):
        with pytest.raises(HTTPError) as err:
            check(sent)
        assert err.value.status == 403 and "CSRF" in err.value.message
    with pytest.raises(HTTPError):
        check(headers={"X-CSRF-Token": guard.csrf_token(other)})
    # no session at all: nothing to check against
    req = request("POST", "/submit")
    admitted(guard, req)
    with pytest.raises(HTTPError):
        guard.check_csrf(req, token)


def test_bearer_requests_need_no_csrf_token(store):
    ann = store.create_token("ann")
    guard = Guard(store, require_tokens=True)
    req = request("POST", "/api/labels", headers=bearer(ann))
    admitted(guard, req)
    guard.check_csrf(req, None)
    assert guard.page_session(guard.identity(req)) == (None, None)


def test_replacing_or_revoking_a_token_ends_its_sessions(store):
    token = store.create_token("ann")
    guard = Guard(store, require_tokens=True)
    _, cookie = guard.new_session(store.labeler_by_token(token))
    assert admitted(guard, request(cookie=cookie)).labeler.name == "ann"
    token = store.create_token("ann", replace=True)
    assert guard.identify(request(cookie=cookie)).labeler is None
    _, cookie = guard.new_session(store.labeler_by_token(token))
    assert admitted(guard, request(cookie=cookie)).labeler.name == "ann"
    store.revoke("ann")
    gone = guard.identify(request(cookie=cookie))
    assert gone.labeler is None and gone.session is None
    assert refusal(guard, request(cookie=cookie))[0] == 401
    assert guard.identify(request(cookie=cookie[:-2] + "00")).session is None  # forged


def test_pages_get_an_anonymous_session_until_sign_in(store):
    guard = Guard(store)
    ident = admitted(guard, request())
    session, cookie = guard.page_session(ident)
    assert session.labeler_id == 0 and cookie is not None
    again = admitted(guard, request(cookie=cookie))
    assert guard.page_session(again) == (again.session, None)
    assert again.session.nonce == session.nonce


def test_admission_refuses_oversized_malformed_and_cross_origin_requests(store):
    guard = Guard(store, max_body_bytes=100)
    assert refusal(guard, request("POST", headers={"content-length": "101"}))[0] == 413
    assert refusal(guard, request("POST", headers={"content-length": "1e3"}))[0] == 400
    assert admitted(guard, request("POST", headers={"content-length": "100"})) is not None
    evil = {"origin": "http://evil.example"}
    assert refusal(guard, request("POST", headers=evil)) == (403, "Cross-origin request refused.")
    assert admitted(guard, request("GET", headers=evil)) is not None  # reads are not refused
    same = {"origin": "http://127.0.0.1:8765"}
    assert admitted(guard, request("POST", headers=same)) is not None
