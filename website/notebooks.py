"""A demo's own page: its notebook (the code that produced the numbers), a header with its downloads and
the command that runs it, and what its committed run printed, read from its records (nothing is executed
at build time). The MkDocs hook calls these; website/render.py draws the shared pieces (badges, plots)."""

from __future__ import annotations

import html
import posixpath
import re

from records import catalog
from records.record import Record
from website.render import (LONG_TABLE_ROWS, SUMMARY_HEAD, SUMMARY_TAIL, _short_float, attr, badge, demo_src_uri, plot_path,
                             record_state)


def demo_of_page(src_uri: str) -> catalog.Demo | None:
    return next((d for d in catalog.discover().values() if demo_src_uri(d) == src_uri), None)


def topics_showing(demo: str) -> list[tuple[str, str]]:
    """(src_uri, title) of every topic page whose front matter lists the demo."""
    from website.site_pages import topic_pages

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


def table_html(table: dict) -> str:
    """A record's table as HTML (for notebook pages, whose content is HTML already); a long table is
    summarised like on the topic pages (first and last rows), the full table folded below it."""
    columns, rows = table["columns"], table["rows"]
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)

    def body(rows) -> str:
        return "".join("<tr>" + "".join(f"<td>{html.escape(_plain_cell(c))}</td>" for c in row) + "</tr>"
                       for row in rows)

    title = f'<p><strong>{html.escape(str(table["title"]))}</strong></p>'
    if len(rows) <= LONG_TABLE_ROWS:
        return f"{title}<table><thead><tr>{head}</tr></thead><tbody>{body(rows)}</tbody></table>"
    gap = [f"... {len(rows) - SUMMARY_HEAD - SUMMARY_TAIL} more rows"] + [None] * (len(columns) - 1)
    summary = body([*rows[:SUMMARY_HEAD], gap, *rows[-SUMMARY_TAIL:]])
    return (f"{title}<table><thead><tr>{head}</tr></thead><tbody>{summary}</tbody></table>"
            f'<details class="note"><summary>Full table ({len(rows)} rows)</summary>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body(rows)}</tbody></table></details>")


def _plain_cell(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else _short_float(v)
    return " ".join(str(v).split())


def demo_page_outputs(demo: catalog.Demo, page_src_uri: str, records: dict[str, Record] | None = None) -> str:
    """HTML under a notebook page's header: what the committed run printed, from its records (tables,
    plots, checks, what was not run), one folded block per device, the first one open. Nothing is
    executed at build time: the notebook below shows the code, this shows its measured output."""
    records = catalog.load_records(demo.name) if records is None else records
    if not records:
        return ""
    page_dir = posixpath.splitext(page_src_uri)[0]  # the page is served at demos/<topic>/<demo>/
    blocks = []
    for i, (device_class, rec) in enumerate(records.items()):
        label = html.escape(catalog.device_label(device_class))
        parts = [f"<p>{badge(record_state(rec))} Measured on <strong>{html.escape(rec.provenance.device_name)}"
                 f"</strong>, {html.escape(rec.provenance.utc[:10])}, size preset {html.escape(rec.size)}, "
                 f"run took {rec.wall_time_s:.0f} s.</p>"]
        parts += [table_html(t) for t in rec.tables]
        for s in rec.series:
            url = posixpath.relpath(plot_path(rec.demo, rec.device_class, s["name"]), page_dir)
            parts.append(f'<p><img src="{html.escape(url)}" alt="{attr(s["title"])}" loading="lazy"></p>')
        passed = sum(c.passed for c in rec.checks)
        parts.append(f"<p>{passed} of {len(rec.checks)} correctness checks passed.</p>")
        if rec.not_run:
            parts.append("<p>Not run on this device: " + "; ".join(
                f"<strong>{html.escape(v)}</strong> ({html.escape(r)})" for v, r in rec.not_run) + "</p>")
        blocks.append(f'<details class="success mm-demo-output" data-search-exclude="record"{" open" if i == 0 else ""}>'
                      f"<summary>Output of the committed run on {label} (from the record, not re-executed)</summary>"
                      + "".join(parts) + "</details>")
    return "".join(blocks)


NOTEBOOK_REPO = "https://github.com/ml-systems-measured/ml-systems-measured"


def downloadable_notebook(demo: catalog.Demo, source_ipynb: str) -> str:
    """The demo as a notebook that runs in a fresh Jupyter or Colab: a Python 3 kernelspec and a first
    cell that installs the demos and the harness as a package when they are not importable (outside a
    clone), and chooses the size preset and the results folder; a last cell keeps a record of the run."""
    import json

    nb = json.loads(source_ipynb)
    nb.setdefault("metadata", {})
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb["metadata"]["language_info"] = {"name": "python"}
    setup = f'''# Setup: run this cell first. Inside a clone of the repository it installs nothing.
SIZE = "small"            # tiny (seconds) | small (CPU default) | full (fills a GPU)
DEVICE = "auto"           # auto (CUDA when present) | cpu | cuda
RESULTS_DIR = "results"   # where this run's record is written

import importlib.util, subprocess, sys
if importlib.util.find_spec("demos.harness") is None:  # a fresh Jupyter or Colab: install the package
    # --no-deps keeps the PyTorch (and NumPy, ...) the environment already has; the harness needs only
    # torch, and the repository's requirements.txt lists the exact versions the records were made with.
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "ml-systems-measured @ git+{NOTEBOOK_REPO}"])
    importlib.invalidate_caches()
sys.argv[1:] = ["--device", DEVICE, "--size", SIZE, "--results-dir", RESULTS_DIR]  # the demo's options'''
    record = f'''# Keep a record of this run. The harness writes one when the demo runs as a script, so when this
# notebook's run left none, the same code runs once more as a script (at the same size and device).
from pathlib import Path
if not list(Path(RESULTS_DIR, "{demo.name}").glob("*.json")):
    subprocess.check_call([sys.executable, "-m", "{demo.module}", *sys.argv[1:]])
print("records:", sorted(str(p) for p in Path(RESULTS_DIR, "{demo.name}").glob("*.json")))'''
    cell = lambda cell_id, text: {"cell_type": "code", "execution_count": None, "id": cell_id,  # noqa: E731
                                  "metadata": {}, "outputs": [], "source": text}
    nb["cells"] = [cell("mm-setup", setup), *nb.get("cells", []), cell("mm-keep-record", record)]
    return json.dumps(nb, indent=1)
