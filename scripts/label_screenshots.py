"""The README screenshots of the labeling page and the admin page, from a small demo database.

    python scripts/label_screenshots.py              # writes docs/images/label-page.png
    python scripts/label_screenshots.py --out docs/images --scale 2

Builds a throw-away database with a few example tasks, has three simulated labelers answer
most of them (so the admin page shows counts, agreement and comments), serves the app on
loopback and photographs both pages in headless Chromium.  The browser driver is the one the
browser tests use, ``tests/browser.py``: this script puts ``tests/`` on its import path.

Needs the installed package (``pip install -e '.[dev]'``: FastAPI, uvicorn, playwright) and
Debian's ``/usr/bin/chromium`` (``apt-get install chromium``); without the browser it says
so and exits with status 1.  Writes ``label-page.png`` and ``label-admin.png``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from browser import chromium, missing
from nlhf.label.app import AppSettings, create_app
from nlhf.label.store import LabelStore
from nlhf.label.tasks import TaskInput
from nlhf.web import running_server

DEMO_TASKS = [
    TaskInput(
        "Explain in two sentences why the sky is blue.",
        "Sunlight is scattered by the molecules in the air, and short (blue) wavelengths are "
        "scattered much more than long (red) ones. So blue light reaches our eyes from every "
        "direction of the sky.",
        "The sky is blue because it reflects the ocean.\nThat is also why it looks grey on "
        "cloudy days.",
    ),
    TaskInput(
        [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Give me a name for a grey cat."},
        ],
        "How about Earl Grey?",
        "Cats come in many colours, and grey cats are popular. Naming a pet is a personal "
        "decision, so think about what you like.",
    ),
    TaskInput(
        "Write a haiku about autumn rain.",
        "Cold rain on red leaves,\nthe gutter hums a low song,\nsummer washes out.",
        "Rain falls in autumn\nIt is wet and it is cold\nI do not like it",
    ),
    TaskInput(
        "Is it safe to eat raw cookie dough?",
        "Not entirely: raw flour and raw eggs can carry bacteria (E. coli, Salmonella). "
        "Heat-treated flour and pasteurized eggs make it much safer.",
        "Yes, cookie dough is always safe to eat.",
    ),
    TaskInput(
        "Summarize: 'The meeting moved from Tuesday to Thursday because the room was booked.'",
        "The meeting is now on Thursday; the room was taken on Tuesday.",
        "Meeting Thursday.",
    ),
    TaskInput(
        "Translate 'good morning' into French.",
        "Bonjour.",
        "Bonsoir.",
    ),
    TaskInput(
        "What is 17 × 3?",
        "51",
        "17 × 3 = 17 + 17 + 17 = 51.",
    ),
    TaskInput(
        "Suggest a title for a blog post about <script> tags in HTML.",
        "Why <script> Tags Belong at the Bottom",
        "HTML <script> tags: a short guide to async and defer",
    ),
]

# How the simulated labelers lean: the probability of picking response A.
PROFILES = {"ana": 0.8, "ben": 0.75, "chloé": 0.6}
COMMENTS = {
    "ana": "B is confidently wrong.",
    "ben": "Both fine; A is more helpful.",
    "chloé": "Hard to judge <em>style</em> here.",
}


def demo_store(path: str, k: int = 3, seed: int = 0) -> tuple[LabelStore, str]:
    """A database with the demo tasks, simulated labels from three labelers, and the sign-in
    token of the admin whose view the screenshots show."""
    rng = random.Random(seed)
    store = LabelStore(path, rng=rng)
    store.add_tasks(DEMO_TASKS)
    for name, lean in PROFILES.items():
        labeler = store.labeler_for_name(name)
        for n in range(len(DEMO_TASKS) - 2):
            job = store.next_assignment(labeler.id, k=k)
            if job is None:
                break
            roll = rng.random()
            wanted = "a" if roll < lean else ("tie" if roll < lean + 0.1 else "b")
            if n == 4 and name == "chloé":
                wanted = "skip"
            display = {"a": "right" if job.swapped else "left",
                       "b": "left" if job.swapped else "right"}.get(wanted, wanted)  # fmt: skip
            comment = COMMENTS[name] if n == 0 else ""
            store.submit(labeler.id, job.id, display, comment, k=k)
    return store, store.create_token("dana", admin=True)


def take(out: Path, scale: float = 1.0) -> list[Path]:
    """Write label-page.png and label-admin.png into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store, token = demo_store(str(Path(tmp) / "demo.sqlite"))
        app = create_app(AppSettings(db=store.url, labels_per_task=3), store)
        with running_server(app) as url, chromium(viewport=(1280, 820), scale=scale) as ctx:
            page = ctx.new_page()
            page.set_viewport_size({"width": 1280, "height": 560})
            page.goto(f"{url}/login?token={token}")
            with page.expect_navigation():
                page.click("#token-login button")
            page.goto(url + "/")
            page.keyboard.press("1")
            page.keyboard.press("c")
            page.keyboard.type("Accurate and to the point.")
            page.locator("#comment").blur()
            label_png = out / "label-page.png"
            page.screenshot(path=str(label_png), full_page=True)
            page.set_viewport_size({"width": 1280, "height": 820})
            page.goto(url + "/admin")
            admin_png = out / "label-admin.png"
            page.screenshot(path=str(admin_png), full_page=True)
            page.close()
        store.close()
    return [label_png, admin_png]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/label_screenshots.py")
    parser.add_argument("--out", default="docs/images", help="folder for the PNG files")
    parser.add_argument("--scale", type=float, default=1.0, help="device pixel ratio")
    args = parser.parse_args(argv)
    reason = missing()
    if reason:
        print(f"cannot take screenshots: {reason}", file=sys.stderr)
        return 1
    for path in take(Path(args.out), args.scale):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
