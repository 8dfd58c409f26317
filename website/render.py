"""Records become Markdown: per-device tabs, tables, plots, provenance, badges, metrics, claims.

Plain Python with no MkDocs in it; website/mkdocs_hook.py calls it. Records are data from
contributors, so every string taken from one goes through ``esc`` before it reaches a page: a
record can never inject HTML, script or Markdown links.
"""

from __future__ import annotations

import html
import posixpath
import re

from records import digest as digests
from records.record import Record
from records import catalog, datasheets, devices, units
from records.numbers import fmt_number, fmt_pair
from records.paths import REPO_ROOT
from website import sizing
from website.claims import MissingMetric, gpu_class_for, gpu_classes, judge, known_device, metric_value
from website.markers import Marker, substitute, transform_outside_code

PLOTS_DIR = "assets/plots"
# The characters Python-Markdown (with the tables extension) accepts a backslash escape for.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|>])")


def esc(value) -> str:
    """Text from a record, made inert: HTML-escaped, Markdown punctuation backslash-escaped,
    newlines flattened (they would end a table row)."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    # '&' opened an entity above (&lt; &gt; &amp;) and must stay literal for it to work
    return _MD_SPECIAL.sub(r"\\\1", text)


def attr(value) -> str:
    """Text from a record for an HTML attribute value (raw HTML: Markdown does not touch it)."""
    return html.escape(" ".join(str(value).split()), quote=True)


def fmt_percent(fraction: float) -> str:
    """A fraction as a percentage that keeps a difference from 100% visible: 0.996 -> 99.6%, not 100%."""
    pct = 100 * fraction
    if pct == 0 or abs(pct) >= 1000:
        return f"{pct:,.0f}%"
    return f"{pct:.3g}%"


def plural(n: int, noun: str) -> str:
    """'1 check', '3 checks'."""
    return f"{n:,} {noun if n == 1 else noun + 's'}"


def singular(unit: str) -> str:
    """A count's unit for the value 1: 'kernels' -> 'kernel', 'microbatches' -> 'microbatch', 'GPUs' -> 'GPU'."""
    for ending, replacement in (("ies", "y"), ("ches", "ch"), ("shes", "sh"), ("sses", "ss"), ("xes", "x")):
        if unit.endswith(ending):
            return unit[:-len(ending)] + replacement
    return unit[:-1] if unit.endswith("s") and not unit.endswith("ss") and len(unit) > 2 else unit


CONTINUOUS_UNITS = {"fraction", "x", "ns", "us", "ms", "s", "B", "KB", "MB", "GB", "KiB", "MiB", "GiB", "%"}


SMALLER_UNIT = {"GiB": ("MiB", 1024), "MiB": ("KiB", 1024), "KiB": ("B", 1024),
                "GB": ("MB", 1000), "MB": ("KB", 1000), "KB": ("B", 1000)}


def fmt_value(value: float, unit: str) -> str:
    if unit in SMALLER_UNIT and 0 < abs(value) < 0.01:  # "4 B", not "3.81e-06 MiB"
        while unit in SMALLER_UNIT and abs(value) < 1:
            unit, factor = SMALLER_UNIT[unit]
            value *= factor
        if unit == "B":
            return f"{round(value):,} B"
    if unit in units.UNSPOKEN:  # "0.0137", not "0.0137 mse": the sentence says what the number is
        return f"{int(value):,}" if float(value).is_integer() else fmt_number(value)
    if float(value).is_integer() and "/" not in unit and unit not in CONTINUOUS_UNITS:
        return f"{int(value):,} {esc(singular(unit) if value == 1 else unit)}"  # counts: "2 compiles", "1 kernel"
    if unit == "fraction":
        return fmt_percent(value)
    if unit == "x":
        return f"{value:,.0f}x" if abs(value) >= 100 else f"{value:.2f}x"  # "6,506x", not "6506.22x"
    return f"{fmt_number(value)} {esc(unit)}"


# -- badges and provenance ------------------------------------------------------------------------
BADGES = {
    "fresh": ("mm-fresh", "fresh", "measured by the current demo code"),
    "stale": ("mm-stale", "demo changed since this was measured",
              "the demo, the harness or a module it imports changed after this record was made"),
}


def badge(state: str) -> str:
    css, text, title = BADGES[state]
    return f'<span class="mm-badge {css}" title="{title}">{text}</span>'


def record_state(rec: Record, current_digest: str | None = None) -> str:
    """fresh | stale | missing: the one freshness rule, against the demo on disk (or a given digest: tests)."""
    if current_digest is not None:
        return digests.freshness(rec.digest, current_digest)
    demo = catalog.discover().get(rec.demo)
    return catalog.freshness(demo, rec) if demo is not None else digests.STALE


def provenance_line(rec: Record) -> str:
    p = rec.provenance
    versions = ", ".join(f"{esc(k)} {esc(v)}" for k, v in p.packages.items()
                         if v and k in ("torch", "triton", "jax", "onnxruntime"))
    parts = [f"**{esc(p.device_name)}**"]
    if p.cuda:
        parts.append(f"CUDA {esc(p.cuda)}" + (f", driver {esc(p.driver)}" if p.driver else ""))
    if p.device_kind == "cpu" and p.cpu_count:
        threads = p.torch_threads or "?"
        parts.append(f"{esc(p.cpu_count)} cores, {esc(threads)} thread{'' if threads == 1 else 's'}")
    parts += [versions, f"Python {esc(p.python)}", esc(p.utc[:10])]
    if p.commit:
        parts.append(f"commit {esc(p.commit[:10])}" + (" (measured from a modified copy of it)" if p.dirty else ""))
    parts.append(f"size preset {esc(rec.size)}, run took {rec.wall_time_s:.0f} s")
    return "Measured on " + " · ".join(x for x in parts if x)


def stability_line(rec: Record) -> str:
    """What the timing protocol's stability guard saw in this run (demos/harness/timing.py), one line; empty for a
    record made before the guard existed."""
    st = rec.get("stability")
    if not isinstance(st, dict) or not isinstance(st.get("measurements"), int):
        return ""
    timings = [t for t in st.get("timings", []) if isinstance(t, dict)]
    worst = max((t.get("spread") for t in timings if isinstance(t.get("spread"), (int, float))), default=None)
    text = f"Timing stability: {st['measurements']} measurements"
    text += ", all stable" if not st.get("unstable") else f", {esc(st['unstable'])} unstable (flagged)"
    if isinstance(st.get("preempted_samples"), int) and isinstance(st.get("samples"), int):
        text += f", {st['preempted_samples']} of {st['samples']} samples preempted and left out"
    if st.get("remeasured"):
        text += f", {esc(st['remeasured'])} measured again"
    if worst is not None:
        text += f"; widest spread (90th over 10th percentile) {worst:.1f}x"
    load = st.get("load_1min")
    if isinstance(load, list) and len(load) == 2 and all(isinstance(x, (int, float)) for x in load):
        text += f"; load {load[0]:.1f}-{load[1]:.1f} on {esc(st.get('cpu_count') or '?')} cores"
    return text


def ceilings_line(rec: Record) -> str:
    items = []
    for name, c in rec.ceilings.items():
        text = f"{esc(name.replace('_', ' '))} {fmt_value(c.value, c.unit)}"
        peak = datasheets.peak(rec.device_class, c)
        if peak and devices.is_gpu_class(rec.device_class):
            text += f" ({fmt_percent(c.value / peak)} of the {fmt_number(peak)} datasheet peak)"
        items.append(text)
    return "Ceilings measured in the same run: " + " · ".join(items)


# -- the results block --------------------------------------------------------------------------------
def _indent(text: str, n: int = 4) -> str:
    pad = " " * n
    return "\n".join(pad + line if line.strip() else "" for line in text.splitlines())


# A cell that is only a Markdown link to an https page (a datasheet's source) shows as that link; anything else,
# other schemes and addresses with quotes, spaces or brackets included, stays inert text.
_LINK_CELL = re.compile(r"\[([^\[\]]{1,80})\]\((https://[A-Za-z0-9.-]+(?:/[A-Za-z0-9._~/%+=&?#-]*)?)\)")


def _cell(v) -> str:
    if isinstance(v, str) and (link := _LINK_CELL.fullmatch(v.strip())):
        return f"[{esc(link.group(1))}]({link.group(2)})"
    if v is None or (isinstance(v, str) and v.strip() in ("-", "–", "—")):  # no value here (a variant not run, no
        return "n/a"                                                        # event): said, never a bare dash
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):  # as the demo rounded it; thousands separated
        return f"{v:,.0f}" if abs(v) >= 1000 else _short_float(v)
    return esc(v)


CELL_DIGITS = 4  # a float a demo did not round (26.308792114257812) shows this many significant digits


def _short_float(v: float) -> str:
    text = repr(v)
    digits = len(re.sub(r"e.*$", "", text).replace("-", "").replace(".", "").lstrip("0"))
    return text if digits <= CELL_DIGITS + 1 else f"{v:.{CELL_DIGITS}g}"


LONG_TABLE_ROWS = 10  # a longer table is summarised (its first and last rows) with the full table folded below
SUMMARY_HEAD, SUMMARY_TAIL = 5, 2
WIDE_TABLE_COLUMNS = 8  # a wider table gets the compact style (smaller type, tighter cells)


def _rows_md(columns: list, rows: list) -> str:
    head = "| " + " | ".join(esc(c) for c in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join([head, rule, *body])


def table_md(table: dict) -> str:
    """A record's table as Markdown: its title in bold, units kept in the headers as the demo wrote them.
    A long table (more than LONG_TABLE_ROWS rows) shows its first and last rows with a row saying how
    many are between, and the full table folded in a collapsible block right below it."""
    columns, rows = table["columns"], table["rows"]
    title = f"**{esc(table['title'])}**"
    if len(columns) >= WIDE_TABLE_COLUMNS:
        title += f'\n{{: .mm-wide-title data-columns="{len(columns)}" }}'
    if len(rows) <= LONG_TABLE_ROWS:
        return f"{title}\n\n{_rows_md(columns, rows)}"
    hidden = len(rows) - SUMMARY_HEAD - SUMMARY_TAIL
    gap = [f"... {hidden} more rows" if i == 0 else "" for i in range(len(columns))]
    summary = _rows_md(columns, [*rows[:SUMMARY_HEAD], gap, *rows[-SUMMARY_TAIL:]])
    full = _indent(_rows_md(columns, rows))
    kind = "note mm-wide" if len(columns) >= WIDE_TABLE_COLUMNS else "note"  # the folded copy is compact too
    return (f"{title}\n\n{summary}\n\n"
            f'??? {kind} "Full table: {esc(table["title"]).replace(chr(34), "&quot;")} ({len(rows)} rows)"\n\n{full}')


def is_timeline(series: dict) -> bool:
    """A Gantt-shaped series (drawn as a timeline by website/plots.py)."""
    return series.get("kind") in ("gantt", "steps")


def evidence_and_rest(tables: list[str], plots: list[str]) -> tuple[str, list[str]]:
    """A device tab shows one piece of evidence: the run's first plot (a schedule's timeline first), or its first
    table when it drew none; the other tables and plots go into the tab's fold, so a page with many demos reads in
    one sitting."""
    if plots:
        return plots[0], tables + plots[1:]
    return (tables[0], tables[1:]) if tables else ("", [])


def plot_path(demo: str, device_class: str, series_name: str, phone: bool = False) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.\-]", "_", f"{device_class}-{series_name}")
    return f"{PLOTS_DIR}/{demo}/{safe}{'.phone' if phone else ''}.svg"


PHONE_MEDIA = "(max-width: 44.9375em)"  # the theme's phone and small-tablet widths (below 720 px)


def plot_md(title: str, url: str, phone_url: str) -> str:
    """A plot: its phone copy on a narrow screen, the wide one elsewhere; lazy (below the fold: not on the load path).
    Raw HTML, since Markdown has no <picture>; every value is escaped for an attribute."""
    return (f'<picture><source media="{PHONE_MEDIA}" srcset="{attr(phone_url)}">'
            f'<img src="{attr(url)}" alt="{_inert_attr(title)}" loading="lazy"></picture>')


_MD_IN_ATTR = str.maketrans({c: f"&#{ord(c)};" for c in "[]()!*_`{}\\<>"})


def _inert_attr(value) -> str:
    """An attribute value in raw HTML that Markdown still scans: escaped for HTML, and Markdown's punctuation as
    character references, so a record's "![x](javascript:...)" stays text in the alt."""
    return attr(value).translate(_MD_IN_ATTR)


CHECKS_SHOWN = 20  # a long list of passed checks is in the record; the page shows the first ones


def provenance_chip(rec: Record, state: str, record_url: str, code_url: str = "") -> str:
    """One short line under the evidence: freshness, device, the main package, the date, the record itself and the
    code that produced it (the demo's notebook page, with downloads)."""
    p = rec.provenance
    main = next((f"{esc(k)} {esc(v)}" for k, v in p.packages.items() if v and k in ("torch", "jax")), "")
    parts = [f"**{esc(p.device_name)}**", main, esc(p.utc[:10]), f"[record]({record_url})",
             f"[code]({code_url})" if code_url else ""]
    return f'{badge(state)} <span class="mm-prov" markdown>' + " · ".join(x for x in parts if x) + "</span>"


def device_tab(rec: Record, state: str, page_dir: str, code_url: str = "", url_dir: str | None = None) -> str:
    """The evidence (one plot or table), a provenance chip, then one fold with the rest of the run: the full
    provenance, the ceilings, what the stability guard saw, the other tables and plots, the correctness checks and
    the variants not run. ``page_dir``: the page's source folder (Markdown links, which MkDocs rewrites);
    ``url_dir``: the folder of its URL (the raw HTML of a plot, which MkDocs leaves alone)."""
    record_url = posixpath.relpath(f"results/{rec.demo}/{rec.device_class}.json", page_dir or ".")
    plots = []
    for series in sorted(rec.series, key=lambda s: not is_timeline(s)):  # a schedule's timeline first: it is the picture
        url, phone = (posixpath.relpath(plot_path(rec.demo, rec.device_class, series["name"], p),
                                        (page_dir if url_dir is None else url_dir) or ".")
                      for p in (False, True))
        plots.append(plot_md(series["title"], url, phone))
    evidence, rest = evidence_and_rest([table_md(t) for t in rec.tables], plots)
    checks = rec.checks
    failed = [c for c in checks if not c.passed]
    shown = failed + [c for c in checks if c.passed][:max(0, CHECKS_SHOWN - len(failed))]
    lines = "\n".join(f"- {esc(c.name)}{' (a wrong variant, caught)' if c.expected_failure else ''}: {esc(c.detail)}"
                      for c in shown)
    if len(shown) < len(checks):
        lines += (f"\n- ... and {len(checks) - len(shown)} more passed checks, all listed in the "
                  f"[record]({record_url})")
    folded = [provenance_line(rec), ceilings_line(rec)] + ([stability_line(rec)] if stability_line(rec) else [])
    folded += rest
    folded.append(f"**{len(checks) - len(failed)} of {plural(len(checks), 'correctness check')} passed**\n\n{lines}")
    if rec.not_run:
        folded.append("**Not run on this device**\n\n" + "\n".join(f"- **{esc(variant)}**: {esc(reason)}"
                                                                     for variant, reason in rec.not_run))
    more_plots = sum(r.startswith("<picture>") for r in rest)
    bits = ["provenance", "ceilings"]
    bits += [plural(n, noun) for n, noun in ((len(rest) - more_plots, "more table"), (more_plots, "more plot")) if n]
    title = "This run: " + ", ".join(bits + [plural(len(checks), "correctness check")])
    fold = f'??? info mm-run "{title}"\n\n' + "\n\n".join(_indent(part) for part in folded)
    return "\n\n".join(x for x in (evidence, provenance_chip(rec, state, record_url, code_url), fold) if x)


def tab_label(device_class: str) -> str:
    """A content-tab label: the class's datasheet label, made inert (it sits inside a quoted Markdown title)."""
    return esc(catalog.device_label(device_class)).replace('"', "&quot;")


def results_block(demo: str, records: dict[str, Record], current_digest: str | None, page_dir: str,
                  code_url: str = "", url_dir: str | None = None) -> str:
    """A tab per device with a record: the GPUs first, newest first (H100 or H200, whichever was measured), then the
    CPU. No empty tab: a GPU number still to measure is named once per page (drop_pending)."""
    if not records:
        return f'!!! warning "Not measured yet"\n    No record of `{demo}` exists: run `python -m scripts.regen {demo}`.'
    order = [*gpu_classes(records), *(c for c in records if not devices.is_gpu_class(c))]
    tabs = [(tab_label(c), device_tab(records[c], record_state(records[c], current_digest), page_dir, code_url, url_dir))
            for c in order]
    return "\n\n".join(f'=== "{label}"\n\n{_indent(body)}' for label, body in tabs)


def demo_src_uri(demo: catalog.Demo) -> str:
    """Where a demo's notebook page comes from: its source file, relative to the repository."""
    return demo.path.relative_to(REPO_ROOT).as_posix()


def code_url(demo: catalog.Demo, page_dir: str) -> str:
    """The demo's notebook page (the code that produced the numbers, with downloads), for the provenance chip."""
    return posixpath.relpath(demo_src_uri(demo), page_dir or ".")


# -- inline metrics and claims --------------------------------------------------------------------
def pending(demo: str) -> str:
    """What a number of a device without a record renders as, for now: drop_pending removes its sentence."""
    return f"\ue000{demo}\ue001"


ORIGIN_LABELS = {"computed": "computed", "datasheet": "datasheet", "static": "static analysis"}


def origin_of(name: str, rec: Record, records: dict[str, Record]) -> str:
    """What a metric's value is: its record says. A GPU record made before metrics said it takes the origin its
    demo's CPU record gives the same metric (the check keeps CPU records fresh): the origin is a property of the
    demo's code, not of the device, and the GPU record's next measurement writes it."""
    metric = rec.metrics.get(name)
    if metric is None or not metric.measured:
        return metric.origin if metric is not None else "measured"
    cpu = records.get("cpu")
    if devices.is_gpu_class(rec.device_class) and cpu is not None and name in cpu.metrics:
        return cpu.metrics[name].origin
    return "measured"


def metric_text(marker: Marker, records: dict[str, Record], current_digest: str | None = None) -> str:
    device = marker.device
    if device == "gpu":  # whichever GPU has it, the newest measurement first
        device = gpu_class_for(marker.metric.name, records)
    rec = records.get(device)
    if rec is None:
        return pending(marker.demo)
    # only a value measured in this run carries its device; a computed, datasheet or static-analysis one says so
    origin = origin_of(marker.metric.name, rec, records)
    label = catalog.device_label(device) if origin == "measured" else ORIGIN_LABELS[origin]
    if origin == "measured" and devices.is_gpu_class(device) and record_state(rec, current_digest) == digests.STALE:
        label += f", {rec.provenance.utc[:10]}"  # a GPU record kept from before a code change: dated, not current
    try:
        value, unit = metric_value(rec, marker.metric)
    except MissingMetric:
        if devices.is_gpu_class(device):  # an older GPU record without this metric: pending, like no record
            return pending(marker.demo)
        return f'<span class="mm-value mm-missing">not measured on {esc(label)}</span>'
    # data-metric, not title: a title becomes a theme tooltip, and a page with hundreds of them loads slowly
    kind = "" if origin == "measured" else f' data-origin="{origin}"'
    return (f'<span class="mm-value" data-metric="{attr(marker.metric.name)}"{kind}>{fmt_value(value, unit)} '
            f'({esc(label)})</span>')


SNIPPET = re.compile(r"-{1,}8<-{1,}")  # pymdownx.snippets' include marker: an artifact must stay inert text


def artifact_block(marker: Marker, records: dict[str, Record]) -> str:
    """A record's text artifact as a collapsible code block; the fence outgrows any backtick run
    in the text, so the artifact cannot close it and escape into the page."""
    device = next(iter(gpu_classes(records)), "gpu") if marker.device == "gpu" else marker.device
    label, rec = catalog.device_label(device), records.get(device)
    if rec is None:
        return pending(marker.demo)
    text = rec.artifacts.get(marker.artifact)
    if text is None:
        return f'\n\n!!! note "{esc(marker.artifact)}"\n    Not yet measured on {esc(label)}.\n\n'
    text = SNIPPET.sub(lambda m: m.group(0).replace("<", "\u2039"), text)  # shown as --8‹--, never included
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    body = _indent(f"{fence}text\n{text.rstrip()}\n{fence}")
    return f'\n\n??? example "{esc(marker.artifact)} ({esc(label)}, from the record)"\n\n{body}\n\n'


class ContradictedClaim(ValueError):
    """A page states what a record contradicts: the build fails (the check names it too)."""


def claim_text(marker: Marker, records: dict[str, Record]) -> str:
    """A claim the records hold renders as a check mark after the sentence that states it in words; the comparison
    it checked is in the mark's tooltip, never in the reader's text. A contradicted claim fails the build. A device
    without a record, or a record without the metric, leaves the claim pending: its sentence is dropped."""
    verdicts = judge(marker, records)
    contradicted = [v for v in verdicts if v.status == "contradicted"]
    if contradicted:
        v = contradicted[0]
        lhs, rhs = fmt_pair(v.lhs, v.rhs)
        raise ContradictedClaim(f"{marker.source}: contradicted by the {v.device_class} record ({lhs} {marker.op} "
                                f"{rhs}); rewrite the sentence to what was measured (python -m scripts.check)")
    held = [v for v in verdicts if v.status == "holds"]
    if not held:
        return pending(marker.demo)  # no record of the device yet, or its record lacks the metric
    checked = []
    for v in held:
        lhs, rhs = fmt_pair(v.lhs, v.rhs)
        # a comparison of values none of which was measured in the run (a projection, a static count) is not the
        # device's: its tooltip says what they are
        kinds = {origin_of(side.name, records[v.device_class], records) for side in (marker.lhs, marker.rhs)
                 if not isinstance(side, float)} if v.device_class in records else {"measured"}
        label = catalog.device_label(v.device_class) if "measured" in kinds else ORIGIN_LABELS[sorted(kinds)[0]]
        checked.append(f"{label}: {lhs} {marker.op} {rhs}")
    checked = "; ".join(checked)
    return (f'<span class="mm-check" role="img" aria-label="checked against the record" '
            f'data-claim="{attr(marker.expression)}" title="Checked against the record ({attr(checked)})">✓</span>')


# -- a whole page -------------------------------------------------------------------------------------
def url_folder(page_src_uri: str) -> str:
    """The folder of a page's URL (directory URLs): topics/kernel-fusion.md is served as topics/kernel-fusion/,
    an index page as its own folder."""
    name = posixpath.basename(page_src_uri)
    return posixpath.dirname(page_src_uri) if name in ("index.md", "README.md") else page_src_uri.removesuffix(".md")


def render_page(markdown: str, page_src_uri: str, load=catalog.load_records, digests=None,
                lost: list[str] | None = None) -> str:
    """Replace every marker of a page. ``load(demo)`` gives records by device class; ``digests``
    maps demo -> current source digest (None: computed from the demos on disk)."""
    markdown = sizing.expand(markdown, page_src_uri)  # {{ sizing ID }}: a worked problem, computed now
    demos = catalog.discover()
    cache: dict[str, dict] = {}
    page_dir = posixpath.dirname(page_src_uri)
    url_dir = url_folder(page_src_uri)

    def records_of(demo: str) -> dict:
        if demo not in cache:
            cache[demo] = load(demo)
        return cache[demo]

    def render(marker: Marker) -> str:
        if marker.demo not in demos and (digests is None or marker.demo not in digests):
            raise ValueError(f"{marker.source}: no demo named {marker.demo!r} (known: {', '.join(sorted(demos))})")
        if marker.device is not None and not known_device(marker.device):
            raise ValueError(f"{marker.source}: unknown device {marker.device!r}; use gpu or a class of "
                             f"records/datasheets.toml ({', '.join(datasheets.sheets())})")
        records = records_of(marker.demo)
        if marker.kind == "results":
            digest = digests[marker.demo] if digests is not None else None  # None: the demo on disk decides
            url = code_url(demos[marker.demo], page_dir) if marker.demo in demos else ""
            return "\n\n" + results_block(marker.demo, records, digest, page_dir, url, url_dir) + "\n\n"
        if marker.kind == "metric":
            return metric_text(marker, records, digests[marker.demo] if digests is not None else None)
        if marker.kind == "artifact":
            return artifact_block(marker, records)
        return claim_text(marker, records)

    def indented_block(m: re.Match) -> str:  # a block marker inside a fold: its whole output stays inside it
        return _indent(substitute(m.group(2), render, page_src_uri), len(m.group(1)))

    markdown = transform_outside_code(markdown, lambda chunk: INDENTED_BLOCK_MARKER.sub(indented_block, chunk))
    return drop_pending(substitute(markdown, render, page_src_uri), lost)


INDENTED_BLOCK_MARKER = re.compile(r"^( +)(\{\{\s*(?:results|artifact)\b[^\n{}]*\}\})[ \t]*$", re.M)


TOKEN = re.compile("\ue000([A-Za-z0-9_]+)\ue001")
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[^a-z\s])")  # "e.g. the" and "1.5x" do not end a sentence
BULLET = re.compile(r"^(\s*(?:[-*+]|\d+[.)])\s+)")
LEAD_IN = re.compile(r"(\*{1,2}|_{1,2})[^*_]+\1")
STRUCTURE = ("#", "!!!", "???", "===", "|", "<p", "<div", "</", "<details", "---", "```", "~~~")
MEASURED = "mm-value\"", "mm-check\""  # a rendered number or verdict: losing one with a GPU sentence is an error


def drop_pending(markdown: str, lost: list[str] | None = None) -> str:
    """A GPU number or claim not measured yet takes its sentence with it (or its list item, or its table row), so a
    page reads as what has been measured; one line under '## Measured' names what is pending on a GPU (the contributing
    page says how to measure it). A dropped sentence that also held a measured value is appended to ``lost`` (the tests refuse
    such a sentence: a GPU number gets a sentence of its own)."""
    if "\ue000" not in markdown:
        return markdown
    counts: dict[str, int] = {}

    def keep(text: str) -> str:
        sentences = SENTENCE.split(text)
        for sentence in (x for x in sentences if TOKEN.search(x)):
            for demo in TOKEN.findall(sentence):
                counts[demo] = counts.get(demo, 0) + 1
            if lost is not None and any(m in sentence for m in MEASURED):
                lost.append(sentence)
        return " ".join(x for x in sentences if not TOKEN.search(x))

    blocks, out = re.split(r"(\n[ \t]*\n)", markdown), []
    for i, block in enumerate(blocks):
        if i % 2 or "\ue000" not in block:
            out.append(block)
            continue
        units: list[list[str]] = []  # a structural line, a list item with its continuation, or a paragraph
        for line in block.split("\n"):
            stripped, indent = line.lstrip(), len(line) - len(line.lstrip())
            last = units[-1] if units else None
            if stripped.startswith(STRUCTURE) or BULLET.match(line) or last is None or \
                    last[0].lstrip().startswith(STRUCTURE) or \
                    (not BULLET.match(last[0]) and indent != len(last[0]) - len(last[0].lstrip())):
                units.append([line])
            else:
                last.append(line)
        kept, items_gone = [], False
        for unit in units:
            if not any("\ue000" in line for line in unit):
                kept.append("\n".join(unit))
            elif unit[0].lstrip().startswith(STRUCTURE):  # a table row goes; elsewhere only the marker
                line = TOKEN.sub("", keep(unit[0]))
                if not unit[0].lstrip().startswith("|"):
                    kept.append(line)
            else:
                prefix = BULLET.match(unit[0]).group(1) if BULLET.match(unit[0]) else unit[0][:len(unit[0]) - len(unit[0].lstrip())]
                text = keep(" ".join(line.strip() for line in unit)[len(prefix.strip()):].strip())
                items_gone |= bool(BULLET.match(unit[0])) and not text
                if text and not LEAD_IN.fullmatch(text):  # a lead-in like "*On a GPU.*" goes with what it led
                    kept.append(prefix + text)
        if not kept and items_gone and len(out) > 1 and out[-2].rstrip().endswith(":"):  # and the list's lead-in
            lead_in = out[-2].rstrip()
            out[-2] = lead_in[:len(lead_in) - len(SENTENCE.split(lead_in)[-1])].rstrip()
        out.append("\n".join(kept))
    text = "".join(out)
    names = ", ".join(f"{n} number{'s' if n > 1 else ''} of the {esc(d.replace('_', ' '))} demo" if i == 0
                      else f"{n} of the {esc(d.replace('_', ' '))} demo" for i, (d, n) in enumerate(counts.items()))
    note = f'\n\n<p class="mm-pending-note" markdown>Still to measure on a GPU: {names}.</p>\n'  # how: contributing
    return re.sub(r"^## Measured[ \t]*$", lambda m: m.group(0) + note, text, count=1, flags=re.M)


def plot_files(records_by_demo: dict[str, dict[str, Record]]) -> list[tuple[str, str]]:
    """(site path, SVG text) for every series of every record of the given demos."""
    from website.plots import cached_svgs

    paths, jobs = [], []
    for demo, records in records_by_demo.items():
        for c, rec in records.items():
            for s in rec.series:
                for phone in (False, True):
                    paths.append(plot_path(demo, c, s["name"], phone))
                    jobs.append((s, catalog.device_label(c), f"docs/results/{demo}/{c}.json", phone))
    return list(zip(paths, cached_svgs(jobs)))
