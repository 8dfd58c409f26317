"""Plots drawn from a record's series at build time, in one consistent style (SVG)."""

from __future__ import annotations

import hashlib
import io
import json
import math
import multiprocessing
import os
import re
import threading

from records import atomic
from records.paths import CACHE_DIR as ROOT_CACHE

os.environ.setdefault("MPLCONFIGDIR", str(ROOT_CACHE / "matplotlib"))
CACHE_DIR = ROOT_CACHE / "plots"

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator  # noqa: E402

STYLE = {
    "figure.figsize": (7.0, 3.2),  # a page shows one plot per demo: short enough that twelve fit one sitting
    "font.size": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.facecolor": "none",
    "axes.facecolor": "none",
    "savefig.transparent": True,
    "svg.fonttype": "none",  # text stays text: searchable, small, no embedded glyphs
    "svg.hashsalt": "ml-systems-measured",  # stable ids, so rebuilding gives the same bytes
    "text.parse_math": False,  # a "$" in a record's title is a dollar sign, never mathtext (which can crash a build)
}


MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
DASHES = ["-", "--", "-.", ":"]
# A measured point is flagged as noisy when the p90 of the samples behind it is more than this times their p10
# (the harness keeps a measurement up to 2x; about one CPU timing in twelve lands above 1.5x on two shared cores).
NOISY_SPREAD = 1.5
NOISY_STYLE = {"linestyle": "none", "marker": "o", "markersize": 13, "markerfacecolor": "none",
               "markeredgecolor": "#d62728", "markeredgewidth": 1.3}


def noisy_points(series: dict) -> list[tuple[float, float, float]]:
    """(x, y, spread) of every plotted point whose samples scattered more than NOISY_SPREAD (p90/p10)."""
    return [(x, y, s) for line in series["lines"]
            for x, y, s in zip(line["x"], line["y"], line.get("spread") or [None] * len(line["x"]))
            if y is not None and s is not None and s > NOISY_SPREAD]


def plot_title(series: dict, device_label: str) -> str:
    """What was measured and where: the series title with the device that measured it, or, for a
    projection from a model or from datasheet figures (``"computed": true``), the title with "(computed, not measured)" instead: the
    machine that ran the demo did not measure it."""
    if series.get("computed"):
        return f"{series['title']} (computed, not measured)"
    return f"{series['title']} ({device_label}, measured)"


def plain_number(value: float, _pos=None) -> str:
    """A tick label on a log axis as a plain number: 1, 30, 300, 0.01, 2,000, 1,024 (never 10^0 or 3x10^2, never a
    power of two rounded)."""
    if value == 0:
        return "0"
    if abs(value) >= 1e6 or abs(value) < 1e-3:
        return f"{value:.0e}".replace("e+0", "e").replace("e-0", "e-")
    if float(value).is_integer():
        return f"{int(value):,}"  # exact: a size of 1,024 or 16,384 reads as itself, never "1,020"
    if abs(value) >= 1000:
        return f"{float(f'{value:.3g}'):,.0f}"  # three significant digits, thousands separated
    return f"{value:.3g}"


def _log_axis(axis) -> None:
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(plain_number))
    axis.set_minor_formatter(NullFormatter())


# -- Gantt timelines ----------------------------------------------------------------------------------
PHASES = {0.4: "forward", 0.8: "backward"}  # the stepped encoding: stage + 0 idle, +0.4 forward, +0.8 backward
PHASE_COLOURS = {"forward": "#3f6ad8", "backward": "#e0812b", "busy": "#5b8c5a"}


def gantt_lanes(series: dict) -> list[tuple[str, list[tuple[float, float, str, str | None]]]] | None:
    """Bars per lane, (label, [(start, end, phase, text)]), or None when the series is not a timeline.

    Two kinds are understood: ``"gantt"`` with one line per lane (or lane and phase, "stage 0 forward"),
    x = [start, end, start, end, ...] and y = the microbatch (or None) of each endpoint; and ``"steps"``, a
    stepped line per stage as the pipeline demos draw it (y = stage + 0 idle, + 0.4 forward, + 0.8
    backward), whose flat runs become bars."""
    lines = series["lines"]
    if series.get("kind") == "gantt":
        lanes: dict[str, list] = {}
        for line in lines:
            label = line["label"]
            phase = next((p for p in ("forward", "backward") if p in label.lower()), "busy")
            lane = re.sub(r"\s*[·:,-]?\s*(forward|backward)\s*$", "", label, flags=re.I) or label
            xs, ys = line["x"], line["y"]
            bars = lanes.setdefault(lane, [])
            for i in range(0, len(xs) - 1, 2):
                text = None if ys[i] is None else f"{ys[i]:g}"
                bars.append((xs[i], xs[i + 1], phase, text))
        return list(lanes.items())
    if series.get("kind") != "steps":
        return None
    out = []
    for line in lines:
        points = [(x, y) for x, y in zip(line["x"], line["y"]) if y is not None]
        if len(points) < 2:
            return None
        base = math.floor(min(y for _, y in points) + 1e-9)
        bars = []
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            level = round(y0 - base, 3)
            if abs(y0 - y1) > 1e-9 or x1 <= x0:
                continue
            if level not in (0.0, *PHASES):
                return None
            if level in PHASES:
                bars.append((x0, x1, PHASES[level], None))
        out.append((line["label"], bars))
    return out


def _draw_gantt(ax, series: dict, lanes) -> None:
    for row, (label, bars) in enumerate(lanes):
        for phase in ("forward", "backward", "busy"):
            spans = [(a, b - a) for a, b, p, _ in bars if p == phase]
            if spans:
                ax.broken_barh(spans, (row - 0.38, 0.76), facecolors=PHASE_COLOURS[phase], edgecolor="white",
                               linewidth=0.4)
        for a, b, _, text in bars:
            if text is not None:
                ax.text((a + b) / 2, row, text, ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(lanes)), [label for label, _ in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)  # the first lane on top
    ax.grid(axis="y", visible=False)
    phases = [p for p in ("forward", "backward", "busy") if any(p == b[2] for _, bars in lanes for b in bars)]
    ax.legend(handles=[Patch(color=PHASE_COLOURS[p], label=p) for p in phases] + [Patch(facecolor="none",
              edgecolor="0.6", label="idle (blank)")], fontsize=8, frameon=False, ncols=3, loc="upper center",
              bbox_to_anchor=(0.5, -0.18))


PHONE_FIGSIZE = (4.0, 4.0)  # the phone copy: a 390 px screen shows it at about 0.9x, so its legend stays legible
PHONE_TITLE_CHARS = 46


def series_svg(series: dict, device_label: str, phone: bool = False) -> str:
    """One series (lines plus horizontal reference lines, or a Gantt timeline) as an SVG document with
    a transparent background (the site turns it light-on-dark in dark mode). ``phone``: the copy a narrow screen
    loads instead, narrower, its title wrapped and its legend below the axes (a 7-inch plot shrunk to a phone's
    width would print its legend at 6 px)."""
    style = {**STYLE, "figure.figsize": PHONE_FIGSIZE} if phone else STYLE
    with plt.rc_context(style):
        fig, ax = plt.subplots()
        lanes = gantt_lanes(series)
        if lanes:
            _draw_gantt(ax, series, lanes)
            ax.set_xlabel(series["x_label"])
            title = re.sub(r"[:;]\s*low = forward.*$", "", series["title"])
            ax.set_title(_wrapped(plot_title({**series, "title": title}, device_label), phone), fontsize=10)
        else:
            for i, line in enumerate(series["lines"]):
                points = [(x, y) for x, y in zip(line["x"], line["y"]) if y is not None]
                if points:
                    xs, ys = zip(*points)
                    # a marker and a dash pattern per line: two series with equal values stay distinguishable
                    ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)], markersize=4 + (i % 3),
                            linestyle=DASHES[(i // 2) % len(DASHES)], linewidth=1.6, label=line["label"],
                            markerfacecolor="none" if i % 2 else None, alpha=0.9)
            noisy = noisy_points(series)
            if noisy:  # a ring around each, one legend entry: the reader sees which points to trust less
                ax.plot([x for x, _, _ in noisy], [y for _, y, _ in noisy], **NOISY_STYLE,
                        label=f"noisy: p90 above {NOISY_SPREAD:g}x p10 of its samples")
            for hline in series.get("hlines", []):
                ax.axhline(hline["y"], linestyle="--", linewidth=1.2, color="0.45", label=hline["label"])
            if series.get("x_log"):
                ax.set_xscale("log")
                _log_axis(ax.xaxis)
                xs = sorted({x for line in series["lines"] for x, y in zip(line["x"], line["y"])
                             if y is not None and x > 0})
                if 1 < len(xs) <= 8:  # few measured points: label exactly those
                    thin = phone and len(xs) > 5  # a phone's 4-inch axis fits about five labels: every other one
                    ax.set_xticks(xs, [plain_number(x) if not thin or i % 2 == 0 else "" for i, x in enumerate(xs)])
                    ax.xaxis.set_minor_locator(NullLocator())
            if series.get("y_log"):
                ax.set_yscale("log")
                _log_axis(ax.yaxis)
            ax.set_xlabel(series["x_label"])
            ax.set_ylabel(series["y_label"])
            ax.set_title(_wrapped(plot_title(series, device_label), phone), fontsize=10)
            ax.set_ylim(bottom=0 if not series.get("y_log") else None)
            if phone:  # below the axes, one entry per line: nothing drawn over the data
                ax.legend(fontsize=8.5, frameon=False, loc="upper left", bbox_to_anchor=(-0.15, -0.2), ncols=1)
            else:
                ax.legend(fontsize=8, frameon=False)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", transparent=True, metadata={"Date": None, "Creator": None})
        plt.close(fig)
    return buf.getvalue()


def _wrapped(title: str, phone: bool) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(title, PHONE_TITLE_CHARS)) if phone else title


_SOURCE_DIGEST = hashlib.sha256(open(__file__, "rb").read()).hexdigest()  # a change here redraws every plot


def _cache_path(series: dict, device_label: str, phone: bool = False):
    key = json.dumps([series, device_label, STYLE, matplotlib.__version__, _SOURCE_DIGEST, phone], sort_keys=True)
    return CACHE_DIR / f"{hashlib.sha256(key.encode()).hexdigest()}.svg"


def _draw_into_cache(series: dict, device_label: str, where: str = "a record", phone: bool = False) -> None:
    try:
        svg = series_svg(series, device_label, phone)
    except Exception as e:  # a record the check let through but matplotlib cannot draw: one line naming it
        raise ValueError(f"{where}: series {series.get('name')!r} cannot be drawn "
                         f"({type(e).__name__}: {' '.join(str(e).split())[:160]})") from None
    atomic.write_text(_cache_path(series, device_label, phone), svg)


def cached_svgs(jobs: list[tuple[dict, str] | tuple[dict, str, str] | tuple[dict, str, str, bool]]) -> list[str]:
    """SVGs of (series, device label[, the record it is from[, the phone copy]]) jobs. Each is drawn once and kept in .cache/plots
    under a hash of its data and style, so a rebuild only draws what changed. Missing plots are drawn in parallel
    by forked workers when this process runs a single thread (``mkdocs build``); under ``mkdocs
    serve``, whose server threads make forking unsafe, they are drawn here, one by one."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    key = lambda job: _cache_path(job[0], job[1], bool(job[3:4] and job[3]))  # noqa: E731
    missing = list({key(job): job for job in jobs if not key(job).exists()}.values())
    workers = min(len(missing), os.cpu_count() or 1)
    if workers > 1 and threading.active_count() == 1:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            pool.starmap(_draw_into_cache, missing)
    else:
        for job in missing:
            _draw_into_cache(*job)
    return [key(job).read_text() for job in jobs]
