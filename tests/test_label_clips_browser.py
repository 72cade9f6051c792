"""Clip tasks in headless Chromium: the page shows two looping GIFs (fetched through the media
route with the session cookie) under the instruction, and ← → ↑ ↓ answer left, right, tie and
can't tell; on a text task the arrows still do nothing.

Needs Debian's /usr/bin/chromium and the playwright package: skipped with the reason when
they are missing, except under CI (env CI set), where a missing browser is a failure.
"""

import os

import numpy as np
import pytest

import browser
from nlhf.label import clips
from nlhf.label.app import AppSettings, create_app
from nlhf.label.media import Clip
from nlhf.label.store import LabelStore
from nlhf.label.tasks import TaskInput
from nlhf.web import running_server

pytestmark = pytest.mark.slow

INSTRUCTION = "Which agent keeps the ball in play longer?"
LOADED = (
    "() => [...document.querySelectorAll('img.media')].every(i => i.complete && i.naturalWidth)"
)


@pytest.fixture(scope="module")
def context():
    reason = browser.missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests need Chromium under CI: {reason}")
        pytest.skip(reason)
    with browser.chromium() as ctx:
        yield ctx


def gif(seed):
    rng = np.random.default_rng(seed)
    return clips.gif_bytes([rng.integers(0, 256, (10, 10, 3), dtype=np.uint8) for _ in range(4)])


def test_clips_side_by_side_and_the_arrow_keys(context, tmp_path):
    store = LabelStore(str(tmp_path / "labels.sqlite"))
    pairs = [(gif(2 * i), gif(2 * i + 1)) for i in range(4)]
    ids = clips.request(store, pairs, INSTRUCTION, run_id="browser")
    store.add_tasks([TaskInput("A text task", "first answer", "second answer")])
    app = create_app(AppSettings(db=store.url, labels_per_task=1), store)
    keys = [("ArrowLeft", "left"), ("ArrowRight", "right"), ("ArrowUp", "tie"),
            ("ArrowDown", "unclear")]  # fmt: skip
    with running_server(app) as url:
        page = context.new_page()
        page.goto(url + "/login")
        page.fill("#name", "alice")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        for key, choice in keys:
            assert page.inner_text("#prompt") == INSTRUCTION
            assert page.eval_on_selector_all(".clip .media", "els => els.map(e => e.tagName)") == [
                "IMG",
                "IMG",
            ]
            page.wait_for_function(LOADED, timeout=10_000)  # both GIFs came through /media
            assert page.eval_on_selector("#clip-left", "e => e.naturalWidth") == 160
            page.keyboard.press(key)
            assert page.is_checked(f"#choice-{choice}")
            with page.expect_navigation():
                page.keyboard.press("Enter")
        # a text task: the arrows keep their usual meaning (nothing is chosen), 1 still works
        assert page.inner_text("#prompt") == "A text task"
        assert page.locator("#choice-unclear").count() == 0
        page.keyboard.press("ArrowLeft")
        assert not page.locator("input[name=choice]:checked").count()
        page.keyboard.press("1")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert page.is_visible("#done")
        page.close()
    records = {r.task_id: r for r in store.label_records()}
    for task_id, (_, shown) in zip(ids, keys, strict=True):
        record = records[task_id]
        other = "b" if record.shown_left == "a" else "a"
        expected = {"left": record.shown_left, "right": other}.get(shown, shown)
        assert record.choice == expected, (task_id, shown)
    assert clips.collect(store, ids)[ids[3]] == "unclear"
    store.close()


def test_a_webm_clip_is_a_looping_muted_video(context, tmp_path):
    context.clear_cookies()
    store = LabelStore(str(tmp_path / "labels.sqlite"))
    webm = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01\x42\x82\x84webm" + b"\0" * 40
    store.add_tasks([TaskInput.for_clips(INSTRUCTION, Clip.of(gif(0)), Clip.of(webm))])
    app = create_app(AppSettings(db=store.url), store)
    with running_server(app) as url:
        page = context.new_page()
        page.goto(url + "/login")
        page.fill("#name", "bob")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        video = page.locator("video.media")
        assert video.count() == 1
        state = video.evaluate("v => [v.autoplay, v.loop, v.muted, v.playsInline]")
        assert state == [True, True, True, True]
        page.close()
    store.close()
