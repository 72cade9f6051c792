"""Headless Chromium for the browser tests and the screenshots: Debian's build, via Playwright.

    import browser                               # tests/ is on sys.path under pytest
    if browser.missing() is None:
        with browser.chromium() as context:      # a fresh profile, no network besides the app
            page = context.new_page()
            page.goto("http://127.0.0.1:8765/")

Used by tests/test_label_browser.py and scripts/label_screenshots.py (which puts tests/ on
its path); it is test tooling, not part of the installed package.

Playwright's own browser download (``playwright install``) is never used: the browser is the
system's ``/usr/bin/chromium`` (``apt-get install chromium``; override with $NLHF_CHROMIUM),
started with background networking, updates and sync switched off.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = os.environ.get("NLHF_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def missing() -> str | None:
    """Why the browser cannot run here (None when it can)."""
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} not found (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install playwright)"
    return None


@contextmanager
def chromium(viewport: tuple[int, int] = (1280, 900), scale: float = 1.0) -> Iterator[Any]:
    """A Playwright ``BrowserContext`` of headless Chromium with a throw-away profile."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="nlhf-chromium-") as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": viewport[0], "height": viewport[1]},
            device_scale_factor=scale,
            accept_downloads=True,
        )
        try:
            yield context
        finally:
            context.close()
