"""Plots drawn from a record's series at build time, in one consistent style (SVG)."""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
import threading

from demos.harness import atomic
from demos.harness.paths import CACHE_DIR as ROOT_CACHE

os.environ.setdefault("MPLCONFIGDIR", str(ROOT_CACHE / "matplotlib"))
CACHE_DIR = ROOT_CACHE / "plots"

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


_SOURCE_DIGEST = hashlib.sha256(open(__file__, "rb").read()).hexdigest()  # a change here redraws every plot


def _cache_path(series: dict, device_label: str):
    key = json.dumps([series, device_label, STYLE, matplotlib.__version__, _SOURCE_DIGEST], sort_keys=True)
    return CACHE_DIR / f"{hashlib.sha256(key.encode()).hexdigest()}.svg"


def _draw_into_cache(series: dict, device_label: str) -> None:
    atomic.write_text(_cache_path(series, device_label), series_svg(series, device_label))


def cached_svgs(jobs: list[tuple[dict, str]]) -> list[str]:
    """SVGs of (series, device label) jobs. Each is drawn once and kept in .cache/plots under a hash
    of its data and style, so a rebuild only draws what changed. Missing plots are drawn in parallel
    by forked workers when this process runs a single thread (``mkdocs build``); under ``mkdocs
    serve``, whose server threads make forking unsafe, they are drawn here, one by one."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    missing = list({_cache_path(*job): job for job in jobs if not _cache_path(*job).exists()}.values())
    workers = min(len(missing), os.cpu_count() or 1)
    if workers > 1 and threading.active_count() == 1:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            pool.starmap(_draw_into_cache, missing)
    else:
        for job in missing:
            _draw_into_cache(*job)
    return [_cache_path(*job).read_text() for job in jobs]
