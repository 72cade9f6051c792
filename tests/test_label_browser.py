"""The real labeling page in headless Chromium: sign in, label by keys and clicks, escaping,
admin page, export download, and loading the export with nlhf.data.

Needs Debian's /usr/bin/chromium and the playwright package: skipped with the reason when
they are missing, except under CI (env CI set), where a missing browser is a failure.
"""

import os

import pytest

import browser
from nlhf.data import load_pairs
from nlhf.label.app import AppSettings, create_app
from nlhf.label.store import LabelStore
from nlhf.label.tasks import TaskInput
from nlhf.web import running_server

pytestmark = pytest.mark.slow

EVIL = '<script>window.pwned = 1</script><b>bold</b> <img src=x onerror="window.pwned=2">'


@pytest.fixture(scope="module")
def context():
    reason = browser.missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests need Chromium under CI: {reason}")
        pytest.skip(reason)
    with browser.chromium() as ctx:
        yield ctx


def test_label_tasks_by_keys_and_clicks_then_export(context, tmp_path):
    store = LabelStore(str(tmp_path / "labels.sqlite"))
    tasks = [
        TaskInput(f"Escaping <i>test</i>: {EVIL}", EVIL, "A calm, plain answer."),
        TaskInput("Name a colour.", "Blue.", "The sky is blue because of Rayleigh scattering."),
        TaskInput([{"role": "user", "content": "Say hi"}], "Hi!", "Hello there."),
        TaskInput("Count to three.", "1, 2, 3", "one two"),
    ]
    store.add_tasks(tasks)
    by_text = {(t.response_a, t.response_b): t for t in tasks}
    app = create_app(AppSettings(db=store.url, labels_per_task=2), store)
    with running_server(app) as url:
        page = context.new_page()
        page.goto(url + "/")
        assert page.url.endswith("/login")
        page.fill("#name", "alice")
        with page.expect_navigation():
            page.keyboard.press("Enter")

        # untrusted text shows as text; nothing in it runs or becomes markup
        left, right = page.inner_text("#response-left"), page.inner_text("#response-right")
        assert {left, right} == {EVIL, "A calm, plain answer."}
        assert "<i>test</i>" in page.inner_text("#prompt")
        assert page.locator("main script, main b, main img, main i").count() == 0
        assert page.evaluate("window.pwned") is None
        assert page.inner_text("#done-count") == "0"

        shown = []  # (left text, right text, answer) per task, in order

        def current():
            return page.inner_text("#response-left"), page.inner_text("#response-right")

        # 1: key "1" (left), Enter
        shown.append((*current(), "left"))
        page.keyboard.press("1")
        assert page.is_checked("#choice-left")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert page.inner_text("#done-count") == "1"

        # 2: click the right-hand response card, then the Submit button
        shown.append((*current(), "right"))
        page.click("#card-right")
        assert page.is_checked("#choice-right")
        with page.expect_navigation():
            page.click("#submit")

        # 3: "t" for tie, "c" to comment (letters typed there are text), Enter submits
        shown.append((*current(), "tie"))
        page.keyboard.press("t")
        page.keyboard.press("c")
        page.keyboard.type("ab <b>1</b>")
        page.keyboard.press("Shift+Enter")
        page.keyboard.type("02")
        assert page.is_checked("#choice-tie")
        with page.expect_navigation():
            page.keyboard.press("Enter")

        # 4: "s" skips
        shown.append((*current(), "skip"))
        page.keyboard.press("s")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert page.is_visible("#done")
        assert page.inner_text("#done-count") == "4"

        # what was clicked is stored in the task's own A/B terms
        records = {r.task_id: r for r in store.label_records()}
        assert len(records) == 4
        for left_text, right_text, answer in shown:
            pair = by_text.get((left_text, right_text)) or by_text[(right_text, left_text)]
            swapped = (left_text, right_text) not in by_text
            task_id = next(i for i, t in store.tasks().items() if t.response_a == pair.response_a)
            expected = {"left": "b" if swapped else "a", "right": "a" if swapped else "b"}
            assert records[task_id].choice == expected.get(answer, answer)
            assert records[task_id].shown_left == ("b" if swapped else "a")
        (commented,) = [r for r in records.values() if r.comment]
        assert commented.comment == "ab <b>1</b>\n02" and commented.choice == "tie"

        # admin page: counts, the comment shown as text, export download
        page.goto(url + "/admin")
        assert page.inner_text("#stat-labels") == "4"
        assert "ab <b>1</b>" in page.inner_text("#comments")
        assert page.locator("#comments b").count() == 0
        page.select_option("select[name=ties]", "half")
        with page.expect_download() as info:
            page.click("#export-form button[type=submit]")
        path = tmp_path / "export.jsonl"
        info.value.save_as(path)
        pairs = load_pairs(path)
        assert len(pairs) == 4  # two decided pairs + the tie in both orders; skip never
        assert sorted(p.weight for p in pairs) == [0.5, 0.5, 1.0, 1.0]
        assert page.evaluate("window.pwned") is None
        page.close()
    store.close()


def test_token_mode_page_needs_the_sign_in_link(context, tmp_path):
    context.clear_cookies()
    store = LabelStore(str(tmp_path / "labels.sqlite"))
    store.add_tasks([TaskInput("p", "first answer", "second answer")])
    token = store.create_token("bob")
    app = create_app(AppSettings(db=store.url, require_tokens=True), store)
    with running_server(app) as url:
        page = context.new_page()
        response = page.goto(url + "/")
        assert response.status == 401
        assert "token is required" in page.inner_text("#message")
        assert page.locator("#label-form").count() == 0
        page.goto(f"{url}/login?token={token}")
        assert "Sign in as bob" in page.inner_text("h2")  # the link itself signs no one in
        with page.expect_navigation():
            page.click("#token-login button")
        assert page.url == url + "/"  # the token is not left in the address bar
        assert page.inner_text("#who") == "bob"
        page.keyboard.press("2")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert page.is_visible("#done")
        assert page.goto(url + "/admin").status == 403
        page.close()
    (record,) = store.label_records()
    assert record.labeler == "bob"
    store.close()
