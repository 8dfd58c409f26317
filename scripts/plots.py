"""Plots drawn from a record's series at build time, in one consistent style (SVG)."""

from __future__ import annotations

import io
import os

from demos.harness.cli import REPO_ROOT

os.environ.setdefault("MPLCONFIGDIR", str(REPO_ROOT / ".cache" / "matplotlib"))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "figure.figsize": (7.0, 3.8),
    "font.size": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.fonttype": "none",  # text stays text: searchable, small, no embedded glyphs
    "svg.hashsalt": "ml-systems-measured",  # stable ids, so rebuilding gives the same bytes
}


def series_svg(series: dict, device_label: str) -> str:
    """One series (lines plus horizontal reference lines) as an SVG document."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        for line in series["lines"]:
            points = [(x, y) for x, y in zip(line["x"], line["y"]) if y is not None]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o", markersize=4, linewidth=1.6, label=line["label"])
        for hline in series.get("hlines", []):
            ax.axhline(hline["y"], linestyle="--", linewidth=1.2, color="0.35", label=hline["label"])
        if series.get("x_log"):
            ax.set_xscale("log")
        if series.get("y_log"):
            ax.set_yscale("log")
        ax.set_xlabel(series["x_label"])
        ax.set_ylabel(series["y_label"])
        ax.set_title(f"{series['title']} ({device_label})", fontsize=10)
        ax.set_ylim(bottom=0 if not series.get("y_log") else None)
        ax.legend(fontsize=8, frameon=False)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    return buf.getvalue()
