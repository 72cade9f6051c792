"""The web app through its ASGI interface: sign-in, labelling, escaping, CSRF, tokens, 4xx."""

import json
import re

import pytest
from fastapi.testclient import TestClient

from nlhf.label.app import AppSettings, create_app
from nlhf.label.store import LabelStore
from nlhf.label.tasks import TaskInput

EVIL = '<script>window.pwned = 1</script><b>bold</b> & "quotes"'
LOCAL = "http://127.0.0.1"


@pytest.fixture
def store(tmp_path):
    s = LabelStore(str(tmp_path / "labels.sqlite"))
    s.add_tasks(
        [
            TaskInput(f"Prompt with <i>{EVIL}</i>", EVIL, "plain answer"),
            TaskInput("Second prompt", "one", "two"),
            TaskInput([{"role": "user", "content": "chat <u>q</u>"}], "x", "y"),
        ]
    )
    yield s
    s.close()


def local_app(store, **kw):
    return create_app(AppSettings(db=store.url, labels_per_task=2, **kw), store)


def sign_in(client, name):
    """Sign in through the JSON API; returns the session's CSRF token."""
    anon = client.get("/api/session").json()["csrf_token"]
    r = client.post("/api/login", json={"name": name}, headers={"X-CSRF-Token": anon})
    assert r.status_code == 200, r.text
    return r.json()["csrf_token"]


def form_token(html):
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def test_browser_flow_with_forms_and_escaping(store):
    client = TestClient(local_app(store), base_url=LOCAL)
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login"
    login = client.get("/login")
    r = client.post("/login", data={"name": "ann", "csrf_token": form_token(login.text)})
    assert r.status_code == 200 and 'id="label-form"' in r.text
    page = r.text
    # untrusted text arrives escaped; the only script element is the app's own file
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in page
    assert "&lt;i&gt;" in page and "<i>" not in page and "<b>bold" not in page
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/app.js" defer>']
    assert "default-src 'none'" in r.headers["content-security-policy"]
    job = re.search(r'name="assignment_id" value="(\d+)"', page).group(1)
    r = client.post(
        "/submit",
        data={
            "assignment_id": job,
            "choice": "tie",
            "comment": "c",
            "csrf_token": form_token(page),
        },
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert store.label_records()[0].choice == "tie"
    assert "1</strong> labelled" in client.get("/").text


def test_every_state_changing_route_needs_the_csrf_token(store):
    app = local_app(store)
    client = TestClient(app, base_url=LOCAL)
    token = sign_in(client, "ann")
    job = client.get("/api/next").json()["assignment_id"]
    posts = sorted(
        {r.path for r in app.routes if "POST" in getattr(r, "methods", set())} - {"/static/{name}"}
    )
    assert {"/submit", "/api/labels", "/login", "/logout", "/admin/tokens"} <= set(posts)
    bodies = {
        "/api/labels": {"assignment_id": job, "choice": "left"},
        "/api/login": {"name": "eve"},
    }
    form = {"assignment_id": str(job), "choice": "left", "name": "eve"}
    for path in posts:
        for sent in (None, "0" * 40):  # missing, then wrong
            headers = {"X-CSRF-Token": sent} if sent else {}
            if path in bodies:
                r = client.post(path, json=bodies[path], headers=headers)
            else:
                r = client.post(path, data=form | ({"csrf_token": sent} if sent else {}))
            assert r.status_code == 403, (path, sent, r.status_code, r.text[:200])
    # a valid token from another origin is refused too
    r = client.post(
        "/api/labels",
        json=bodies["/api/labels"],
        headers={"X-CSRF-Token": token, "Origin": "http://evil.example"},
    )
    assert r.status_code == 403
    assert store.label_records() == []
    r = client.post("/api/labels", json=bodies["/api/labels"], headers={"X-CSRF-Token": token})
    assert r.status_code == 201


def test_api_bad_requests_are_clear_4xx(store):
    client = TestClient(local_app(store), base_url=LOCAL)
    h = {"X-CSRF-Token": sign_in(client, "ann")}
    nxt = client.get("/api/next").json()
    job = nxt["assignment_id"]
    assert nxt["progress"] == {"done": 0, "remaining": 3}
    ok = client.post("/api/labels", json={"assignment_id": job, "choice": "right"}, headers=h)
    assert ok.status_code == 201 and not ok.json()["duplicate"]
    again = client.post("/api/labels", json={"assignment_id": job, "choice": "right"}, headers=h)
    assert again.status_code == 200 and again.json()["duplicate"]
    assert again.json()["label_id"] == ok.json()["label_id"]
    changed = client.post("/api/labels", json={"assignment_id": job, "choice": "left"}, headers=h)
    assert changed.status_code == 409 and "already answered" in changed.json()["detail"]
    cases = [
        ({"assignment_id": 9999, "choice": "left"}, 404),
        ({"assignment_id": 2**70, "choice": "left"}, 404),
        ({"assignment_id": -3, "choice": "left"}, 404),
        ({"assignment_id": job, "choice": "up"}, 422),
        ({"assignment_id": "1", "choice": "left"}, 422),
        ({"assignment_id": job, "choice": "left", "extra": 1}, 422),
        ({"choice": "left"}, 422),
        ({"assignment_id": job, "choice": "left", "comment": "x" * 6000}, 422),
    ]
    for body, status in cases:
        r = client.post("/api/labels", json=body, headers=h)
        assert r.status_code == status, (body, r.text)
        assert "detail" in r.json()
    raw = client.post(
        "/api/labels", content=b"{not json", headers=h | {"Content-Type": "application/json"}
    )
    assert raw.status_code == 422
    big = client.post("/api/labels", content=b"x" * 100_000, headers=h)
    assert big.status_code == 413
    assert len(store.label_records()) == 1


def test_form_bad_requests(store):
    client = TestClient(local_app(store), base_url=LOCAL)
    token = sign_in(client, "ann")
    job = str(client.get("/api/next").json()["assignment_id"])
    r = client.post("/submit", data={"assignment_id": job, "csrf_token": token})
    assert r.status_code == 400 and "Choose A, B" in r.text
    r = client.post("/submit", data={"assignment_id": "abc", "choice": "left", "csrf_token": token})
    assert r.status_code == 400
    for big in ("77", "9" * 30):
        r = client.post(
            "/submit", data={"assignment_id": big, "choice": "left", "csrf_token": token}
        )
        assert r.status_code == 404
    r = client.post("/submit", json={"assignment_id": job}, headers={"X-CSRF-Token": token})
    assert r.status_code == 415
    r = client.post("/login", data={"name": "", "csrf_token": token})
    assert r.status_code == 400
    assert client.get("/nowhere").status_code == 404
    assert client.get("/static/missing.js").status_code == 404
    assert client.put("/api/labels").status_code == 405


def test_loopback_mode_refuses_other_host_names(store):
    client = TestClient(local_app(store), base_url=LOCAL)
    assert client.get("/api/session").status_code == 200
    for host in ("evil.example", "10.0.0.5:8765", "localhost.evil.example"):
        assert client.get("/api/session", headers={"Host": host}).status_code == 403
    assert client.get("/api/session", headers={"Host": "localhost:8765"}).status_code == 200
    assert client.get("/api/session", headers={"Host": "[::1]:8765"}).status_code == 200


def test_token_mode_answers_nothing_without_a_token(store):
    admin_token = store.create_token("boss", admin=True)
    ann_token = store.create_token("ann")
    app = local_app(store, require_tokens=True, free_token_attempts=1000)
    client = TestClient(app)  # host "testserver": remote use
    paths = {r.path.replace("{name}", "app.css") for r in app.routes if hasattr(r, "methods")}
    paths |= {"/nowhere", "/admin/export.jsonl?ties=half", "/login?token=wrong"}
    for path in sorted(paths):
        for method in ("GET", "POST"):
            if method == "POST" and path.startswith("/login"):  # the sign-in form, no session
                assert client.post(path, data={"name": "eve"}).status_code == 403
                continue
            r = client.request(method, path)
            assert r.status_code == 401, (method, path, r.status_code)
            assert "token" in r.text.lower()
            r = client.request(method, path, headers={"Authorization": "Bearer nope"})
            assert r.status_code == 401, (method, path)
    ann = {"Authorization": f"Bearer {ann_token}"}
    boss = {"Authorization": f"Bearer {admin_token}"}
    assert client.get("/", headers=ann).status_code == 200
    assert client.get("/admin", headers=ann).status_code == 403
    assert client.get("/api/stats", headers=ann).status_code == 403
    assert client.get("/admin/export.jsonl", headers=ann).status_code == 403
    assert client.get("/admin", headers=boss).status_code == 200
    # bearer requests need no CSRF token (browsers never add that header themselves)
    job = client.get("/api/next", headers=ann).json()["assignment_id"]
    r = client.post("/api/labels", json={"assignment_id": job, "choice": "left"}, headers=ann)
    assert r.status_code == 201
    # name sign-in is off
    assert client.post("/api/login", json={"name": "eve"}, headers=ann).status_code == 403


def token_sign_in(client, token):
    """Open a sign-in link and press its button; returns the POST's response."""
    link = client.get(f"/login?token={token}", follow_redirects=False)
    assert link.status_code == 200 and 'id="token-login"' in link.text
    data = {"token": token, "csrf_token": form_token(link.text)}
    return client.post("/login", data=data, follow_redirects=False)


def test_token_sign_in_link_sets_a_session_that_revocation_ends(store):
    ann_token = store.create_token("ann")
    client = TestClient(local_app(store, require_tokens=True))
    r = token_sign_in(client, ann_token)
    assert r.status_code == 303 and r.headers["location"] == "/"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    page = client.get("/")
    assert page.status_code == 200 and 'id="label-form"' in page.text
    store.revoke("ann")
    assert client.get("/").status_code == 401
    assert client.get(f"/login?token={ann_token}").status_code == 401


def test_admin_page_tokens_and_escaped_names(store):
    client = TestClient(local_app(store), base_url=LOCAL)
    h = {"X-CSRF-Token": sign_in(client, "<img src=x onerror=alert(1)>")}
    job = client.get("/api/next").json()["assignment_id"]
    body = {"assignment_id": job, "choice": "left", "comment": "<b>loud</b> comment"}
    assert client.post("/api/labels", json=body, headers=h).status_code == 201
    page = client.get("/admin").text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img" not in page
    assert "&lt;b&gt;loud&lt;/b&gt; comment" in page
    # a name session sees the admin page on loopback but may not make tokens
    assert 'id="token-form"' not in page and 'id="token-note"' in page
    r = client.post("/admin/tokens", data={"name": "eve", "csrf_token": form_token(page)})
    assert r.status_code == 403 and store.labelers()[-1].name != "eve"
    client = TestClient(local_app(store), base_url=LOCAL)
    assert token_sign_in(client, store.create_token("boss", admin=True)).status_code == 303
    page = client.get("/admin").text
    assert 'id="token-form"' in page
    r = client.post(
        "/admin/tokens", data={"name": "bob", "csrf_token": form_token(page), "admin": "1"}
    )
    assert r.status_code == 200
    link = re.search(r'id="login-link">([^<]+)<', r.text).group(1)
    token = link.split("token=")[1]
    assert store.labeler_by_token(token).is_admin
    again = client.post("/admin/tokens", data={"name": "bob", "csrf_token": form_token(page)})
    assert again.status_code == 409
    r = client.post(
        "/admin/revoke",
        data={"name": "bob", "csrf_token": form_token(page)},
        follow_redirects=False,
    )
    assert r.status_code == 303 and store.labeler_by_token(token) is None
    stats = client.get("/api/stats").json()
    assert stats["labels"] == 1 and stats["tasks"] == 3
    export = client.get("/admin/export.jsonl")
    assert export.status_code == 200 and "attachment" in export.headers["content-disposition"]
    (row,) = [json.loads(line) for line in export.text.splitlines()]
    assert row["rejected"] in (EVIL, "plain answer")
    assert client.get("/admin/export.jsonl?ties=keep").status_code == 400
    assert client.get("/admin/export.jsonl?min_votes=x").status_code == 400


def test_token_check_boxes_take_on_true_or_1_and_refuse_anything_else(store):
    client = TestClient(local_app(store), base_url=LOCAL)
    assert token_sign_in(client, store.create_token("boss", admin=True)).status_code == 303
    form = {"name": "eve", "csrf_token": form_token(client.get("/admin").text)}
    for field, value in [("admin", "0"), ("admin", "false"), ("admin", ""), ("replace", "0")]:
        r = client.post("/admin/tokens", data={**form, field: value})
        assert r.status_code == 400 and f"{field} must be on, true or 1" in r.text, (field, value)
    assert "eve" not in [account.name for account in store.labelers()]
    for value in ("on", "true", "1"):
        r = client.post("/admin/tokens", data={**form, "admin": value, "replace": value})
        assert r.status_code == 200 and store.labelers()[-1].is_admin, value


def test_query_numbers_are_plain_ascii_digits_else_400(store):
    client = TestClient(local_app(store), base_url=LOCAL)
    sign_in(client, "ann")
    for raw in ("1_000", "+1", " 1", "²", "١", "x", "", "0"):
        r = client.get("/admin/export.jsonl", params={"min_votes": raw})
        assert r.status_code == 400, (raw, r.status_code)
    assert client.get("/admin/export.jsonl", params={"min_votes": "1"}).status_code == 200


def test_labeler_cannot_use_anothers_assignment(store):
    app = local_app(store)
    ann, bob = TestClient(app, base_url=LOCAL), TestClient(app, base_url=LOCAL)
    sign_in(ann, "ann")
    h = {"X-CSRF-Token": sign_in(bob, "bob")}
    job = ann.get("/api/next").json()["assignment_id"]
    r = bob.post("/api/labels", json={"assignment_id": job, "choice": "left"}, headers=h)
    assert r.status_code == 404
    assert bob.get("/api/next").json()["assignment_id"] != job


def test_database_trouble_is_a_503_not_a_500(store, monkeypatch):
    from sqlalchemy.exc import OperationalError

    client = TestClient(local_app(store), base_url=LOCAL)
    h = {"X-CSRF-Token": sign_in(client, "ann")}
    job = client.get("/api/next").json()["assignment_id"]

    def locked(*args, **kwargs):
        raise OperationalError("INSERT", {}, Exception("database is locked"))

    monkeypatch.setattr(store, "submit", locked)
    r = client.post("/api/labels", json={"assignment_id": job, "choice": "left"}, headers=h)
    assert r.status_code == 503 and "nothing was saved" in r.json()["detail"]


HOSTILE_FORMS = [
    {"assignment_id": "²", "choice": "left"},  # a digit to str.isdigit(), not to int()
    {"assignment_id": "①", "choice": "left"},
    {"assignment_id": "١", "choice": "left"},  # Arabic-Indic one: int() accepts it
    {"assignment_id": "9" * 5000, "choice": "left"},  # past int()'s digit limit
    {"assignment_id": " 1", "choice": "left"},
    {"assignment_id": "+1", "choice": "left"},
    {"assignment_id": "1_0", "choice": "left"},
    {"assignment_id": "0x1", "choice": "left"},
    {"assignment_id": "", "choice": "left"},
    {"assignment_id": "1", "choice": "\x00"},
    {"assignment_id": "1", "choice": "left", "comment": "c" * 6000},
    {f"f{i}": "x" for i in range(30)},  # more fields than a form has
]


def test_hostile_requests_get_a_4xx_with_the_security_headers(store):
    client = TestClient(local_app(store), base_url=LOCAL, raise_server_exceptions=False)
    token = sign_in(client, "ann")
    answers = []
    for form in HOSTILE_FORMS:
        answers.append(client.post("/submit", data={**form, "csrf_token": token}))
    json_h = {"X-CSRF-Token": token, "Content-Type": "application/json"}
    bodies = [b"{", b"[]", b"null", b"\xff\xfe", b"[" * 30000]
    bodies += [b'{"assignment_id": "\xd9\xa1", "choice": "left"}']
    bodies += [b'{"assignment_id": 1e999, "choice": "left"}']
    for body in bodies:
        answers.append(client.post("/api/labels", content=body, headers=json_h))
    for query in ("min_votes=²", "min_votes=١", "min_votes=" + "9" * 5000, "ties=%00"):
        answers.append(client.get(f"/admin/export.jsonl?{query}"))
    answers.append(client.get("/login?token=" + "x" * 5000))
    answers.append(client.get("/static/%2e%2e%2fapp.py"))
    for r in answers:
        assert 400 <= r.status_code < 500, (r.request.url, r.status_code, r.text[:200])
        assert "default-src 'none'" in r.headers["content-security-policy"], r.request.url
        assert r.headers["x-frame-options"] == "DENY"
    assert "more than 20 fields" in answers[len(HOSTILE_FORMS) - 1].text
    assert client.get("/api/session").status_code == 200  # still serving


def test_a_bug_is_a_500_page_with_the_security_headers(store, monkeypatch):
    client = TestClient(local_app(store), base_url=LOCAL, raise_server_exceptions=False)
    sign_in(client, "ann")

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(store, "next_assignment", broken)
    r = client.get("/api/next")
    assert r.status_code == 500 and "nothing was saved" in r.json()["detail"]
    assert "default-src 'none'" in r.headers["content-security-policy"]


def test_the_json_api_wants_json(store):
    client = TestClient(local_app(store), base_url=LOCAL)
    token = sign_in(client, "ann")
    job = client.get("/api/next").json()["assignment_id"]
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        r = client.post(
            "/api/labels",
            content=f'{{"assignment_id": {job}, "choice": "left"}}',
            headers={"X-CSRF-Token": token, "Content-Type": kind},
        )
        assert r.status_code == 415 and "application/json" in r.json()["detail"], kind


def test_cookies_are_secure_over_https_and_sign_out_clears_them(store):
    client = TestClient(local_app(store), base_url="https://127.0.0.1")
    anon = client.get("/api/session")
    assert "secure" in anon.headers["set-cookie"].lower()
    plain = TestClient(local_app(store), base_url=LOCAL)
    assert "secure" not in plain.get("/api/session").headers["set-cookie"].lower()
    token = sign_in(plain, "ann")
    r = plain.post("/logout", data={"csrf_token": token}, follow_redirects=False)
    gone = r.headers["set-cookie"].lower()
    assert "max-age=0" in gone and "httponly" in gone and "samesite=strict" in gone


def test_a_copied_sign_out_cookie_stays_signed_out(store):
    client = TestClient(local_app(store), base_url=LOCAL)
    token = sign_in(client, "ann")
    cookie = client.cookies.get("nlhf_label_session")
    assert client.post("/logout", data={"csrf_token": token}).status_code == 200
    replay = TestClient(local_app(store), base_url=LOCAL, cookies={"nlhf_label_session": cookie})
    assert replay.get("/api/session").json()["labeler"] is None
    assert replay.get("/api/next").status_code == 401


def test_admin_comments_show_invisible_characters_as_marks(store):
    client = TestClient(local_app(store), base_url=LOCAL)
    h = {"X-CSRF-Token": sign_in(client, "ann")}
    job = client.get("/api/next").json()["assignment_id"]
    comment = "fine \u202eetirovaf\u202c zero\u200bwidth"
    body = {"assignment_id": job, "choice": "left", "comment": comment}
    assert client.post("/api/labels", json=body, headers=h).status_code == 201
    page = client.get("/admin").text
    assert "\u202e" not in page and "\u200b" not in page
    assert "fine ⟨U+202E⟩etirovaf⟨U+202C⟩ zero⟨U+200B⟩width" in page
    assert store.label_records()[0].comment == comment  # stored and exported as given


def test_a_login_link_from_another_site_signs_nobody_in(store):
    ann = store.create_token("ann")
    client = TestClient(local_app(store, require_tokens=True))
    r = client.get(f"/login?token={ann}", follow_redirects=False)
    assert r.status_code == 200 and client.get("/api/next").status_code == 401
    # the button's POST needs the page's CSRF token, which another site cannot read
    r = client.post("/login", data={"token": ann}, follow_redirects=False)
    assert r.status_code == 403 and client.get("/api/next").status_code == 401


def test_a_loopback_name_session_opens_nothing_on_a_token_server(store):
    store.create_token("boss", admin=True)
    loopback = TestClient(local_app(store), base_url=LOCAL)
    anon = loopback.get("/api/session").json()["csrf_token"]
    r = loopback.post("/api/login", json={"name": "boss"}, headers={"X-CSRF-Token": anon})
    assert r.status_code == 403  # boss holds a token: no name sign-in as boss
    sign_in(loopback, "ann")
    cookie = loopback.cookies.get("nlhf_label_session")
    remote = TestClient(
        local_app(store, require_tokens=True), cookies={"nlhf_label_session": cookie}
    )
    assert remote.get("/api/next").status_code == 401
    assert remote.get("/api/stats").status_code == 401


def test_the_database_holds_no_key_to_forge_a_cookie_with(store, tmp_path):
    import hashlib
    import hmac
    import secrets
    import sqlite3
    import time

    boss = store.create_token("boss", admin=True)
    TestClient(local_app(store, require_tokens=True)).get(f"/login?token={boss}")
    copy = sqlite3.connect(f"file:{tmp_path / 'labels.sqlite'}?mode=ro", uri=True)
    keys = [bytes.fromhex(v) for (v,) in copy.execute("select value from meta where key='secret'")]
    lid, token_hash = copy.execute("select id, token_hash from labelers").fetchone()
    copy.close()
    for key in keys or [token_hash.encode()]:
        nonce = secrets.token_hex(16)
        v1 = f"v1.{lid}.{nonce}.{token_hash[:12]}"  # the old format
        for body in (v1, f"v2.{lid}.token.{nonce}.{int(time.time())}"):
            forged = f"{body}.{hmac.new(key, body.encode(), hashlib.sha256).hexdigest()}"
            client = TestClient(
                local_app(store, require_tokens=True), cookies={"nlhf_label_session": forged}
            )
            assert client.get("/admin").status_code == 401


def test_wrong_tokens_over_http_end_in_429_with_retry_after(store):
    client = TestClient(local_app(store, require_tokens=True))
    statuses = [
        client.get("/api/next", headers={"Authorization": f"Bearer guess{i}"}).status_code
        for i in range(7)
    ]
    assert statuses[:5] == [401] * 5 and statuses[-1] == 429
    r = client.get("/login?token=another-guess")
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
