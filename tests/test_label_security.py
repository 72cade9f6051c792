"""The labeling app's Guard on its own: admission, identity, roles, CSRF and sessions.

Requests are bare Starlette ``Request`` objects built from an ASGI scope; no app, no routes.
"""

import asyncio

import pytest
from starlette.requests import Request

from nlhf.label.errors import HTTPError
from nlhf.label.keys import KeyFile
from nlhf.label.security import COOKIE, Guard
from nlhf.label.store import LabelError, LabelStore


@pytest.fixture
def store(tmp_path):
    s = LabelStore(str(tmp_path / "labels.sqlite"))
    yield s
    s.close()


@pytest.fixture
def keys(tmp_path):
    return KeyFile(tmp_path / "labels.sqlite.key")


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


def test_token_mode_anonymous_labeler_and_admin(store, keys):
    ann, boss = store.create_token("ann"), store.create_token("boss", admin=True)
    guard = Guard(store, keys, require_tokens=True)

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


def test_open_mode_admin_for_every_local_visitor_but_labelling_needs_a_name(store, keys):
    guard = Guard(store, keys)
    anonymous = admitted(guard, request())
    assert anonymous.labeler is None and anonymous.admin
    assert guard.need_admin(anonymous) is anonymous
    with pytest.raises(HTTPError) as err:
        guard.need_labeler(anonymous)
    assert err.value.status == 401
    _, cookie = guard.new_session(store.labeler_for_name("ann"), "name")
    signed_in = admitted(guard, request(cookie=cookie))
    assert signed_in.labeler.name == "ann" and signed_in.admin and not signed_in.bearer
    for host in ("evil.example", "10.0.0.5:8765"):
        assert refusal(guard, request(headers={"host": host}))[0] == 403
    assert admitted(guard, request(headers={"host": "[::1]:8765"})).labeler is None


def test_csrf_token_must_belong_to_the_session(store, keys):
    guard = Guard(store, keys)
    session, cookie = guard.new_session(store.labeler_for_name("ann"), "name")
    other, _ = guard.new_session(store.labeler_for_name("bob"), "name")
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


def test_bearer_requests_need_no_csrf_token(store, keys):
    ann = store.create_token("ann")
    guard = Guard(store, keys, require_tokens=True)
    headers = {**bearer(ann), "content-type": "application/json"}
    req = request("POST", "/api/labels", headers=headers)
    admitted(guard, req)
    guard.check_csrf(req, None)
    assert guard.page_session(guard.identity(req)) == (None, None)


def test_replacing_or_revoking_a_token_ends_its_sessions(store, keys):
    token = store.create_token("ann")
    guard = Guard(store, keys, require_tokens=True)
    _, cookie = guard.new_session(store.labeler_by_token(token), "token")
    assert admitted(guard, request(cookie=cookie)).labeler.name == "ann"
    token = store.create_token("ann", replace=True)
    assert guard.identify(request(cookie=cookie)).labeler is None
    _, cookie = guard.new_session(store.labeler_by_token(token), "token")
    assert admitted(guard, request(cookie=cookie)).labeler.name == "ann"
    store.revoke("ann")
    gone = guard.identify(request(cookie=cookie))
    assert gone.labeler is None and gone.session is None
    assert refusal(guard, request(cookie=cookie))[0] == 401
    assert guard.identify(request(cookie=cookie[:-2] + "00")).session is None  # forged


def test_pages_get_an_anonymous_session_until_sign_in(store, keys):
    guard = Guard(store, keys)
    ident = admitted(guard, request())
    session, cookie = guard.page_session(ident)
    assert session.labeler_id == 0 and cookie is not None
    again = admitted(guard, request(cookie=cookie))
    assert guard.page_session(again) == (again.session, None)
    assert again.session.nonce == session.nonce


def test_admission_refuses_cross_origin_and_non_json_api_posts(store, keys):
    guard = Guard(store, keys)
    evil = {"origin": "http://evil.example"}
    assert refusal(guard, request("POST", headers=evil)) == (403, "Cross-origin request refused.")
    assert admitted(guard, request("GET", headers=evil)) is not None  # reads are not refused
    same = {"origin": "http://127.0.0.1:8765"}
    assert admitted(guard, request("POST", headers=same)) is not None
    for kind in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"content-type": kind} if kind else {}
        assert refusal(guard, request("POST", "/api/labels", headers=headers))[0] == 415
    json_body = {"content-type": "application/json; charset=utf-8"}
    assert admitted(guard, request("POST", "/api/labels", headers=json_body)) is not None


# --- sessions carry their mode; the key is not in the database; sessions end; wrong tokens


def test_a_name_session_from_loopback_is_refused_by_a_token_mode_server(store, keys):
    store.create_token("boss", admin=True)
    loopback, remote = Guard(store, keys), Guard(store, keys, require_tokens=True)
    with pytest.raises(LabelError) as err:  # a token holder's name cannot be used without it
        store.labeler_for_name("boss")
    assert err.value.status == 403 and "token" in str(err.value)
    _, cookie = loopback.new_session(store.labeler_for_name("ann"), "name")
    assert admitted(loopback, request(cookie=cookie)).labeler.name == "ann"
    assert refusal(remote, request(cookie=cookie))[0] == 401  # same database, same key
    # an anonymous loopback visitor sees the admin pages but may not mint tokens
    anonymous = admitted(loopback, request())
    assert anonymous.admin and not anonymous.manages_tokens
    with pytest.raises(HTTPError) as err:
        loopback.need_token_admin(anonymous)
    assert err.value.status == 403
    name_admin = admitted(loopback, request(cookie=cookie))
    assert not name_admin.manages_tokens


def test_admin_token_sessions_manage_tokens(store, keys):
    boss = store.create_token("boss", admin=True)
    guard = Guard(store, keys, require_tokens=True)
    _, cookie = guard.new_session(store.labeler_by_token(boss), "token")
    assert admitted(guard, request(cookie=cookie)).manages_tokens
    assert admitted(guard, request(headers=bearer(boss))).manages_tokens


def test_a_copy_of_the_database_cannot_forge_a_session(store, keys, tmp_path):
    import hashlib
    import hmac
    import sqlite3

    boss = store.create_token("boss", admin=True)
    guard = Guard(store, keys, require_tokens=True)
    _, real = guard.new_session(store.labeler_by_token(boss), "token")
    copy = sqlite3.connect(f"file:{tmp_path / 'labels.sqlite'}?mode=ro", uri=True)
    assert copy.execute("select count(*) from meta where key = 'secret'").fetchone() == (0,)
    _, token_hash = copy.execute("select id, token_hash from labelers").fetchone()
    sessions = copy.execute("select digest from sessions").fetchall()
    copy.close()
    parts = real.split(".")
    assert len(sessions) == 1 and parts[3] not in str(sessions)  # only a hash of the nonce
    # everything the database holds, used as a signing key, gives no valid cookie
    for guess in (token_hash.encode(), bytes.fromhex(token_hash), sessions[0][0].encode()):
        body = ".".join(parts[:5])
        forged = f"{body}.{hmac.new(guess, body.encode(), hashlib.sha256).hexdigest()}"
        assert refusal(guard, request(cookie=forged))[0] == 401
    assert oct(keys.path.stat().st_mode & 0o777) == "0o600"
    # another key (a copied database served elsewhere) does not accept this cookie either
    other = Guard(store, KeyFile(tmp_path / "other.key"), require_tokens=True)
    assert refusal(other, request(cookie=real))[0] == 401


def test_schema_1_databases_lose_their_in_database_key(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    LabelStore(str(path)).close()
    con = sqlite3.connect(path)
    con.execute("update meta set value = '1' where key = 'schema'")
    con.execute("insert into meta values ('secret', ?)", ("ab" * 32,))
    con.commit()
    con.close()
    LabelStore(str(path)).close()
    con = sqlite3.connect(path)
    assert dict(con.execute("select key, value from meta").fetchall()) == {"schema": "3"}
    con.close()


def test_rotating_the_key_ends_every_session(store, keys):
    ann = store.create_token("ann")
    guard = Guard(store, keys, require_tokens=True)
    _, cookie = guard.new_session(store.labeler_by_token(ann), "token")
    assert admitted(guard, request(cookie=cookie)).labeler.name == "ann"
    assert store.end_all_sessions() == 1
    keys.rotate()
    assert refusal(guard, request(cookie=cookie))[0] == 401
    assert admitted(guard, request(headers=bearer(ann))).labeler.name == "ann"  # tokens stay


def test_sign_out_ends_the_session_on_the_server(store, keys):
    guard = Guard(store, keys)
    _, cookie = guard.new_session(store.labeler_for_name("ann"), "name")
    ident = admitted(guard, request(cookie=cookie))
    assert ident.labeler.name == "ann"
    guard.end_session(ident)
    replayed = admitted(guard, request(cookie=cookie))  # the browser's copy no longer works
    assert replayed.labeler is None and replayed.session is None


def test_sessions_expire_on_the_server(store, keys, monkeypatch):
    import time

    guard = Guard(store, keys, session_seconds=60)
    _, cookie = guard.new_session(store.labeler_for_name("ann"), "name")
    assert admitted(guard, request(cookie=cookie)).labeler.name == "ann"
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 61)
    assert admitted(guard, request(cookie=cookie)).labeler is None


def test_wrong_tokens_are_logged_and_slowed_down(store, keys, caplog):
    ann = store.create_token("ann")
    guard = Guard(store, keys, require_tokens=True)
    with caplog.at_level("WARNING", logger="nlhf.label.security"):
        statuses = [refusal(guard, request(headers=bearer(f"guess{i}")))[0] for i in range(8)]
    assert statuses[:6] == [401] * 6 and statuses[6:] == [429, 429]
    assert sum("wrong token" in r.getMessage() for r in caplog.records) == 6
    req = request(headers=bearer(ann))
    refused = asyncio.run(guard.admit(req))  # even the right token waits out the pause
    assert refused.status == 429 and int(refused.headers["Retry-After"]) >= 1
    guard.throttle.succeeded("unknown")
    assert admitted(guard, request(headers=bearer(ann))).labeler.name == "ann"
