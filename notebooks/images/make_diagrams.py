"""Draw the tutorial's explanatory diagrams as SVG files next to this script.

    .venv/bin/python notebooks/images/make_diagrams.py

The notebook shows them from markdown cells (``![…](images/….svg)``), so they render on a
code host even though the committed notebook carries no outputs.  matplotlib only; the text
stays text in the SVG (``svg.fonttype = none``), which keeps the files small.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

HERE = Path(__file__).resolve().parent
plt.rcParams.update(
    {"svg.fonttype": "none", "svg.hashsalt": "nlhf", "font.family": "DejaVu Sans", "font.size": 10}
)

BLUE, ORANGE, GREEN, GREY = "#dbe8f6", "#fde3c8", "#dcefd9", "#eeeeee"


def box(ax, x, y, w, h, text, color, size=10):
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            fc=color,
            ec="#444444",
            lw=1.0,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=size, linespacing=1.6)


def arrow(ax, start, end, text="", offset=(0.0, 0.12), style="-|>", rad=0.0, color="#333333"):
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=14,
            lw=1.2,
            color=color,
            connectionstyle=f"arc3,rad={rad}",
        )
    )
    if text:
        mx, my = (start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1]
        ax.text(mx, my, text, ha="center", va="center", fontsize=8.5, color="#333333")


def canvas(width, height):
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    return fig, ax


def save(fig, name):
    fig.savefig(HERE / name, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)


def rlhf_vs_nlhf():
    """The two routes from one preference dataset to an aligned policy."""
    fig, ax = canvas(13.0, 4.4)
    box(ax, 1.1, 2.2, 1.9, 1.1, "pre-trained LM\n(next-token\nprediction)", GREY)
    box(ax, 3.45, 2.2, 2.0, 1.1, "① supervised\nfine-tuning\n(demonstrations)", GREY)
    box(ax, 6.0, 3.3, 2.2, 0.95, "preference pairs\n" + r"$(x,\ y_w \succ y_l)$", ORANGE)
    box(ax, 6.0, 1.1, 2.2, 0.95, r"reference policy $\mu$" + "\n(the SFT model)", GREY)
    box(ax, 8.75, 3.3, 2.4, 0.95, "② reward model\n" + r"$r(x, y)$, Bradley–Terry", BLUE)
    box(ax, 11.6, 3.3, 2.5, 0.95, "③ PPO: max E[r]\n" + r"$-\ \beta\,\mathrm{KL}(\pi\|\mu)$", BLUE)
    box(ax, 8.75, 1.1, 2.4, 0.95, "preference model\n" + r"$P(y \succ y^\prime \mid x)$", GREEN)
    box(
        ax,
        11.6,
        1.1,
        2.5,
        0.95,
        "Nash-MD: equilibrium of\n" + r"$P(\pi \succ \pi^\prime) - \tau\,\mathrm{KL}$ game",
        GREEN,
    )
    arrow(ax, (2.05, 2.2), (2.45, 2.2))
    arrow(ax, (4.45, 2.45), (4.9, 3.15), "sample,\nask people", offset=(-0.5, 0.2))
    arrow(ax, (4.45, 1.95), (4.9, 1.25), "frozen copy", offset=(-0.55, -0.2))
    arrow(ax, (7.1, 3.3), (7.55, 3.3))
    arrow(ax, (9.95, 3.3), (10.35, 3.3))
    arrow(ax, (7.1, 3.05), (7.55, 1.35), color="#2e7d32")
    arrow(ax, (9.95, 1.1), (10.35, 1.1), color="#2e7d32")
    ax.text(
        6.0,
        0.38,
        r"(both routes stay close to $\mu$ through a KL term)",
        ha="center",
        fontsize=8.5,
        color="#333333",
    )
    ax.text(13.0, 4.1, "RLHF", ha="right", fontsize=11, weight="bold", color="#1f4e79")
    ax.text(13.0, 0.2, "NLHF", ha="right", fontsize=11, weight="bold", color="#2e7d32")
    save(fig, "rlhf-vs-nlhf.svg")


def preference_cycle():
    """Three answers that beat each other in a circle: no reward can rank them."""
    import numpy as np

    fig, ax = canvas(5.4, 4.4)
    names = ["answer A", "answer B", "answer C"]
    angles = np.deg2rad([90, 330, 210])
    cx, cy, r = 2.7, 2.0, 1.5
    pts = [(cx + r * np.cos(a), cy + r * np.sin(a)) for a in angles]
    for (x, y), name in zip(pts, names, strict=True):
        box(ax, x, y, 1.3, 0.55, name, ORANGE)
    for i in range(3):
        a, b = np.array(pts[i]), np.array(pts[(i + 1) % 3])
        d = (b - a) / np.linalg.norm(b - a)
        arrow(ax, tuple(a + 0.62 * d), tuple(b - 0.62 * d), rad=-0.2)
        mid = (a + b) / 2
        out = mid - np.array([cx, cy])
        out = out / np.linalg.norm(out)
        ax.text(*(mid + 0.75 * out), "beats\n(p = 0.9)", ha="center", va="center", fontsize=8.5)
    ax.text(
        cx,
        cy - 0.05,
        "A ≻ B ≻ C ≻ A:\nno reward has\n" + r"$r_A > r_B > r_C > r_A$",
        ha="center",
        va="center",
        fontsize=8.5,
        color="#7a1f1f",
    )
    save(fig, "preference-cycle.svg")


def nash_md_pg_step():
    """One Nash-MD-PG step: two samples, one judgement, a weighted score-function update."""
    fig, ax = canvas(12.0, 3.4)
    box(ax, 0.9, 1.7, 1.4, 0.8, "prompt x", GREY)
    box(ax, 3.5, 2.6, 2.5, 0.8, r"$y \sim \pi_\theta(\cdot \mid x)$", BLUE)
    box(
        ax,
        3.5,
        0.8,
        2.5,
        0.95,
        r"$y^\prime \sim \pi_\beta \propto \pi_\theta^{1-\beta}\,\mu^{\beta}$"
        + "\n(token by token)",
        GREEN,
    )
    box(ax, 6.35, 1.7, 2.1, 0.9, "judge\n" + r"$p = P(y \succ y^\prime \mid x)$", ORANGE)
    box(
        ax,
        9.9,
        1.7,
        3.9,
        1.4,
        "for every token $y_t$ of $y$:\n"
        + r"$w_t = (p - 1/2) - \tau\, \Sigma_{s \geq t} \log(\pi_\theta(y_s) / \mu(y_s))$"
        + "\n"
        + r"loss $= -\Sigma_t\, w_t \log \pi_\theta(y_t \mid x, y_{<t})$",
        BLUE,
        size=9.5,
    )
    arrow(ax, (1.6, 1.9), (2.25, 2.55))
    arrow(ax, (1.6, 1.5), (2.25, 0.85))
    arrow(ax, (4.75, 2.55), (5.3, 1.95))
    arrow(ax, (4.75, 0.85), (5.3, 1.45))
    arrow(ax, (7.4, 1.7), (7.95, 1.7))
    arrow(
        ax,
        (9.9, 2.4),
        (4.75, 2.85),
        "gradient step on θ (π_β held fixed)",
        offset=(0.3, 0.42),
        rad=0.12,
    )
    save(fig, "nash-md-pg.svg")


if __name__ == "__main__":
    rlhf_vs_nlhf()
    preference_cycle()
    nash_md_pg_step()
    print(f"wrote {', '.join(p.name for p in sorted(HERE.glob('*.svg')))}")
