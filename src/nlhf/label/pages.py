"""HTML of the labeling app: Jinja2 templates with autoescaping, and the static files.

Prompts, responses, comments and labeler names are untrusted text.  Every template is
rendered with autoescaping on (``<script>`` in a completion reaches the browser as
``&lt;script&gt;`` and shows as text), nothing is marked safe, and the pages load only
``/static/app.css`` and ``/static/app.js`` from this package: no inline script, no CDN, so
the Content-Security-Policy the app sends can forbid everything else.  In the admin's
tables, invisible format characters (bidi overrides, zero-width spaces) are shown as
``⟨U+202E⟩`` marks, so a comment cannot disguise itself or the rows around it.

    from nlhf.label.pages import render, static_file
    html = render("label.html", job=assignment, progress=progress, csrf_token=token)
"""

from __future__ import annotations

import math
import unicodedata
from functools import cache
from importlib import resources
from typing import Any

import jinja2

STATIC = {"app.css": "text/css; charset=utf-8", "app.js": "text/javascript; charset=utf-8"}

CHOICE_NAMES = {"a": "A", "b": "B", "tie": "tie", "unclear": "can't tell", "skip": "skip"}


def _number(value: Any, digits: int = 2) -> str:
    """A number for a table cell; an em dash for missing or undefined (NaN) values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def _percent(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{100 * value:.0f}%"


def _visible(text: Any) -> str:
    """``text`` with every control or format character but line breaks and tabs shown as
    ``⟨U+XXXX⟩`` (the marks are plain text; autoescaping still applies)."""
    return "".join(
        f"⟨U+{ord(ch):04X}⟩"
        if unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\n\t"
        else ch
        for ch in str(text)
    )


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("nlhf.label", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _number
    env.filters["pct"] = _percent
    env.filters["visible"] = _visible
    env.globals["choice_names"] = CHOICE_NAMES
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


@cache
def static_file(name: str) -> tuple[bytes, str] | None:
    """(content, media type) of a packaged static file, or None for an unknown name."""
    if name not in STATIC:
        return None
    data = resources.files("nlhf.label").joinpath("static", name).read_bytes()
    return data, STATIC[name]
