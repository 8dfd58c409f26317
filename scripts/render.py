"""Records become Markdown: per-device tabs, tables, plots, provenance, badges, metrics, claims.

Plain Python with no MkDocs in it; scripts/mkdocs_hook.py calls it. Records are data from
contributors, so every string taken from one goes through ``esc`` before it reaches a page: a
record can never inject HTML, script or Markdown links.
"""

from __future__ import annotations

import html
import posixpath
import re

from demos.harness import digest as digests
from demos.harness.record import Record
from scripts import catalog
from scripts.claims import MissingMetric, judge, known_device, metric_value
from scripts.markers import Marker, substitute

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


def fmt_number(v: float, digits: int = 3) -> str:
    """A measured value for prose: ``digits`` significant digits, thousands separated."""
    if isinstance(v, int):
        return f"{v:,}"
    a = abs(v)
    if a >= 10 ** digits:
        return f"{v:,.0f}"
    if a >= 0.01 or a == 0:
        return f"{v:#.{digits}g}".rstrip(".")
    return f"{v:.{digits - 1}e}"


def fmt_pair(a: float, b: float) -> tuple[str, str]:
    """Two values side by side, with enough digits that different values never print the same."""
    for digits in range(3, 8):
        fa, fb = fmt_number(a, digits), fmt_number(b, digits)
        if fa != fb or a == b:
            return fa, fb
    return fa, fb


def fmt_percent(fraction: float) -> str:
    """A fraction as a percentage that keeps a difference from 100% visible: 0.996 -> 99.6%, not 100%."""
    pct = 100 * fraction
    if pct == 0 or abs(pct) >= 1000:
        return f"{pct:,.0f}%"
    return f"{pct:.3g}%"


CONTINUOUS_UNITS = {"fraction", "x", "ns", "us", "ms", "s", "B", "KB", "MB", "GB", "KiB", "MiB", "GiB", "%"}


def fmt_value(value: float, unit: str) -> str:
    if float(value).is_integer() and "/" not in unit and unit not in CONTINUOUS_UNITS:
        return f"{int(value):,} {esc(unit)}"  # counts: "2 compiles", "1 kernels"
    if unit == "fraction":
        return fmt_percent(value)
    if unit == "x":
        return f"{value:.2f}x"
    return f"{fmt_number(value)} {esc(unit)}"


# -- badges and provenance ------------------------------------------------------------------------
BADGES = {
    "fresh": ("mm-fresh", "fresh", "measured by the current demo code"),
    "stale": ("mm-stale", "demo changed since this was measured",
              "the demo, the harness or a module it imports changed after this record was made"),
    "missing-gpu": ("mm-missing", "not yet measured on a GPU", "no GPU record has been committed for this demo"),
}


def badge(state: str) -> str:
    css, text, title = BADGES[state]
    return f'<span class="mm-badge {css}" title="{title}">{text}</span>'


def record_state(rec: Record, current_digest: str | None) -> str:
    return digests.freshness(rec.digest, current_digest)


def provenance_line(rec: Record) -> str:
    p = rec.provenance
    versions = ", ".join(f"{esc(k)} {esc(v)}" for k, v in p.packages.items()
                         if v and k in ("torch", "triton", "jax", "onnxruntime"))
    parts = [f"**{esc(p.device_name)}**"]
    if p.cuda:
        parts.append(f"CUDA {esc(p.cuda)}" + (f", driver {esc(p.driver)}" if p.driver else ""))
    if p.device_kind == "cpu" and p.cpu_count:
        parts.append(f"{esc(p.cpu_count)} cores, {esc(p.torch_threads or '?')} threads")
    parts += [versions, f"Python {esc(p.python)}", esc(p.utc[:10])]
    if p.commit:
        parts.append(f"commit {esc(p.commit[:10])}" + (" (uncommitted changes)" if p.dirty else ""))
    parts.append(f"size preset {esc(rec.size)}, run took {rec.wall_time_s:.0f} s")
    return "Measured on " + " · ".join(x for x in parts if x)


def ceilings_line(rec: Record) -> str:
    items = []
    for name, c in rec.ceilings.items():
        text = f"{esc(name.replace('_', ' '))} {fmt_value(c.value, c.unit)}"
        peak = catalog.datasheet_peak(rec.device_class, c)
        if peak and catalog.is_gpu_class(rec.device_class):
            text += f" ({fmt_percent(c.value / peak)} of the {fmt_number(peak)} datasheet peak)"
        items.append(text)
    return "Ceilings measured in the same run: " + " · ".join(items)


# -- the results block --------------------------------------------------------------------------------
def _indent(text: str, n: int = 4) -> str:
    pad = " " * n
    return "\n".join(pad + line if line.strip() else "" for line in text.splitlines())


def _cell(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):  # as the demo rounded it; thousands separated
        return f"{v:,.0f}" if abs(v) >= 1000 else repr(v)
    return esc(v)


def table_md(table: dict) -> str:
    head = "| " + " | ".join(esc(c) for c in table["columns"]) + " |"
    rule = "|" + "|".join("---" for _ in table["columns"]) + "|"
    rows = ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table["rows"]]
    return f"**{esc(table['title'])}**\n\n" + "\n".join([head, rule, *rows])


def plot_path(demo: str, device_class: str, series_name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.\-]", "_", f"{device_class}-{series_name}")
    return f"{PLOTS_DIR}/{demo}/{safe}.svg"


CHECKS_SHOWN = 20  # a long list of passed checks is in the record; the page shows the first ones


def device_tab(rec: Record, state: str, page_dir: str) -> str:
    parts = [badge(state), provenance_line(rec), ceilings_line(rec)]
    for table in rec.tables:
        parts.append(table_md(table))
    for series in rec.series:
        url = posixpath.relpath(plot_path(rec.demo, rec.device_class, series["name"]), page_dir or ".")
        parts.append(f"![{esc(series['title'])}]({url}){{ loading=lazy }}")  # below the fold: not on the load path
    checks = rec.checks
    failed = [c for c in checks if not c.passed]
    title = f"{len(checks) - len(failed)} of {len(checks)} correctness checks passed"
    shown = failed + [c for c in checks if c.passed][:max(0, CHECKS_SHOWN - len(failed))]
    lines = "\n".join(f"- {esc(c.name)}{' (a wrong variant, caught)' if c.expected_failure else ''}: {esc(c.detail)}"
                      for c in shown)
    if len(shown) < len(checks):
        record_url = posixpath.relpath(f"results/{rec.demo}/{rec.device_class}.json", page_dir or ".")
        lines += (f"\n- ... and {len(checks) - len(shown)} more passed checks, all listed in the record: "
                  f"[{esc(rec.device_class)}.json]({record_url})")
    parts.append(f'??? {"success" if not failed else "failure"} "{title}"\n{_indent(lines)}')
    if rec.not_run:
        lines = "\n".join(f"- **{esc(variant)}**: {esc(reason)}" for variant, reason in rec.not_run)
        parts.append(f'!!! info "Not run on this device"\n{_indent(lines)}')
    return "\n\n".join(parts)


def tab_label(device_class: str) -> str:
    """A content-tab label: the class's datasheet label, made inert (it sits inside a quoted Markdown title)."""
    return esc(catalog.device_label(device_class)).replace('"', "&quot;")


def results_block(demo: str, records: dict[str, Record], current_digest: str | None, page_dir: str) -> str:
    """Tabs with data first (GPUs, then the CPU), so the tab a reader sees first always has numbers;
    while no GPU record exists, a last tab says how to make one."""
    if not records:
        return f'!!! warning "Not measured yet"\n    No record of `{demo}` exists: run `python -m scripts.regen {demo}`.'
    tabs = [(tab_label(c), device_tab(rec, record_state(rec, current_digest), page_dir)) for c, rec in records.items()]
    if not any(catalog.is_gpu_class(c) for c in records):
        tabs.append(("GPU", f"{badge('missing-gpu')}\n\nNo GPU record yet. On a machine with an NVIDIA GPU, run "
                            f"`python -m scripts.regen {demo} --device cuda` and commit "
                            f"`docs/results/{demo}/<gpu>.json` (see the contributing guide)."))
    return "\n\n".join(f'=== "{label}"\n\n{_indent(body)}' for label, body in tabs)


def code_link(demo: catalog.Demo, page_dir: str) -> str:
    return (f"The code that produced these numbers: [{demo.path.name}]"
            f"({posixpath.relpath(demo_src_uri(demo), page_dir or '.')}) (rendered as a notebook, with downloads).")


# -- demo notebook pages ------------------------------------------------------------------------------
def demo_src_uri(demo: catalog.Demo) -> str:
    return demo.path.relative_to(catalog.REPO_ROOT).as_posix()


def demo_of_page(src_uri: str) -> catalog.Demo | None:
    return next((d for d in catalog.discover().values() if demo_src_uri(d) == src_uri), None)


def topics_showing(demo: str) -> list[tuple[str, str]]:
    """(src_uri, title) of every topic page whose front matter lists the demo."""
    from scripts.site_pages import topic_pages

    return [(p.src_uri, p.title) for p in topic_pages() if demo in p.demos]


def demo_page_header(demo: catalog.Demo, page_src_uri: str) -> str:
    """HTML above a demo's notebook page: downloads, the command that runs it, its topic pages."""
    stem = demo.path.stem
    page_dir = posixpath.dirname(page_src_uri)
    topic_links = ", ".join(
        f'<a href="{html.escape(posixpath.relpath(uri.removesuffix(".md"), page_dir + "/" + stem))}/">{html.escape(title)}</a>'
        for uri, title in topics_showing(demo.name)) or "none yet"
    return (f'<div class="admonition info mm-demo-header"><p class="admonition-title">This is the code that produced '
            f'the measurements</p><p>Download <a href="{stem}.py" download>{stem}.py</a> or '
            f'<a href="../{stem}.ipynb" download>{stem}.ipynb</a>. Run it yourself from the repository root: '
            f'<code>python -m {html.escape(demo.module)} --device cpu</code> (or <code>--device cuda</code>). '
            f'Shown on: {topic_links}.</p></div>')


REMOTE_SCRIPT = re.compile(r"<script\b[^>]*>(?:(?!</script>).)*?https?://(?:(?!</script>).)*</script>", re.S | re.I)


def without_remote_scripts(html_text: str) -> str:
    """Drop every inline script that would fetch code from another host (nbconvert's notebook template
    carries a conditional import of mermaid from a CDN): the site requests nothing from other hosts."""
    return REMOTE_SCRIPT.sub("", html_text)


# -- inline metrics and claims --------------------------------------------------------------------
PENDING = "mm-pending"  # a metric of a device without a record: one notice per section says so


def metric_text(marker: Marker, records: dict[str, Record]) -> str:
    label = catalog.device_label(marker.device)
    rec = records.get(marker.device)
    if rec is None:
        return (f'<span class="mm-value mm-missing {PENDING}" data-device="{attr(label)}" '
                f'data-metric="{attr(marker.metric.name)}">–</span>')
    try:
        value, unit = metric_value(rec, marker.metric)
    except MissingMetric:
        return f'<span class="mm-value mm-missing">not measured on {esc(label)}</span>'
    # data-metric, not title: a title becomes a theme tooltip, and a page with hundreds of them loads slowly
    return f'<span class="mm-value" data-metric="{attr(marker.metric.name)}">{fmt_value(value, unit)} ({esc(label)})</span>'


SNIPPET = re.compile(r"-{1,}8<-{1,}")  # pymdownx.snippets' include marker: an artifact must stay inert text


def artifact_block(marker: Marker, records: dict[str, Record]) -> str:
    """A record's text artifact as a collapsible code block; the fence outgrows any backtick run
    in the text, so the artifact cannot close it and escape into the page."""
    label = catalog.device_label(marker.device)
    rec = records.get(marker.device)
    text = None if rec is None else rec.artifacts.get(marker.artifact)
    if text is None:
        return f'\n\n!!! note "{esc(marker.artifact)}"\n    Not yet measured on {esc(label)}.\n\n'
    text = SNIPPET.sub(lambda m: m.group(0).replace("<", "\u2039"), text)  # shown as --8‹--, never included
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    body = _indent(f"{fence}text\n{text.rstrip()}\n{fence}")
    return f'\n\n??? example "{esc(marker.artifact)} ({esc(label)}, from the record)"\n\n{body}\n\n'


def claim_text(marker: Marker, records: dict[str, Record]) -> str:
    verdicts = judge(marker, records)
    chips = []
    for v in verdicts:
        label = "GPU" if v.device_class == "gpu" else catalog.device_label(v.device_class)
        if v.status == "not measured":
            chips.append(f'<span class="mm-claim mm-unmeasured" title="{attr(v.note)}">? not yet measured on {esc(label)}</span>')
        else:
            mark, css = ("✓ holds", "mm-holds") if v.status == "holds" else ("✗ contradicted", "mm-contradicted")
            lhs, rhs = fmt_pair(v.lhs, v.rhs)
            chips.append(f'<span class="mm-claim {css}" title="{attr(marker.expression)}: '
                         f'{lhs} {html.escape(marker.op)} {rhs}">{mark} on {esc(label)} '
                         f'({lhs} {html.escape(marker.op)} {rhs})</span>')
    return f'<span class="mm-claim-expr">{esc(marker.expression)}</span> ' + " ".join(chips)


# -- a whole page -------------------------------------------------------------------------------------
def render_page(markdown: str, page_src_uri: str, load=catalog.load_records, digests=None) -> str:
    """Replace every marker of a page. ``load(demo)`` gives records by device class; ``digests``
    maps demo -> current source digest (None: computed from the demos on disk)."""
    demos = catalog.discover()
    cache: dict[str, dict] = {}
    page_dir = posixpath.dirname(page_src_uri)

    def records_of(demo: str) -> dict:
        if demo not in cache:
            cache[demo] = load(demo)
        return cache[demo]

    def render(marker: Marker) -> str:
        if marker.demo not in demos and (digests is None or marker.demo not in digests):
            raise ValueError(f"{marker.source}: no demo named {marker.demo!r} (known: {', '.join(sorted(demos))})")
        if marker.device is not None and not known_device(marker.device):
            raise ValueError(f"{marker.source}: unknown device {marker.device!r}; use gpu or a class of "
                             f"scripts/datasheets.toml ({', '.join(catalog.datasheets())})")
        records = records_of(marker.demo)
        if marker.kind == "results":
            digest = digests[marker.demo] if digests is not None else demos[marker.demo].digest()
            link = code_link(demos[marker.demo], page_dir) if marker.demo in demos else ""
            return "\n\n" + link + "\n\n" + results_block(marker.demo, records, digest, page_dir) + "\n\n"
        if marker.kind == "metric":
            return metric_text(marker, records)
        if marker.kind == "artifact":
            return artifact_block(marker, records)
        return claim_text(marker, records)

    return pending_notices(substitute(markdown, render, page_src_uri))


def pending_notices(markdown: str) -> str:
    """A metric of a device that has no record yet renders as a dash; each section (## or ###) that
    has any gets one line under its heading naming the devices, instead of a notice per number."""
    parts = re.split(r"(^#{2,3} .*$)", markdown, flags=re.M)
    out = []
    for part in parts:
        devices = sorted(set(re.findall(rf'class="mm-value mm-missing {PENDING}" data-device="([^"]*)"', part)))
        if devices and out and re.match(r"^#{2,3} ", out[-1]):
            note = (f'\n\n<p class="mm-pending-note">– : not yet measured on {", ".join(devices)} '
                    f'(no record from that device yet).</p>\n')
            part = note + part
        out.append(part)
    return "".join(out)


def plot_files(records_by_demo: dict[str, dict[str, Record]]) -> list[tuple[str, str]]:
    """(site path, SVG text) for every series of every record of the given demos."""
    from scripts.plots import cached_svgs

    paths, jobs = [], []
    for demo, records in records_by_demo.items():
        for c, rec in records.items():
            for s in rec.series:
                paths.append(plot_path(demo, c, s["name"]))
                jobs.append((s, catalog.device_label(c)))
    return list(zip(paths, cached_svgs(jobs)))
