"""The thin MkDocs hook: all the work is in website/render.py and website/site_pages.py (plain Python, no MkDocs).

- on_files (before the plugins): add every demo's source as a page, which mkdocs-jupyter renders
  as a notebook (source only, never executed), plus its .ipynb for download; draw every record's
  plots (SVG) and add them as generated files; add assets/datasheets.js, the datasheet figures the
  JavaScript calculators read (generated from records/datasheets.toml).
- on_page_markdown: expand the generated parts (<!-- mm:... --> placeholders: topic map, study
  plans, cheat sheet, glossary, practice cards; website/site_pages.py), then replace the
  {{ results }}, {{ metric }}, {{ claim }} and {{ artifact }} markers of a page.
- on_page_content: refuse a page whose rendered content could run script (website/page_safety.py); give a
  demo's notebook page its download links, run command and topic links.
A malformed record or a bad marker stops the build with one line naming the file and the field.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # MkDocs loads hooks by path

import jupytext  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.plugins import event_priority  # noqa: E402
from mkdocs.structure.files import File  # noqa: E402

import markdown as python_markdown  # noqa: E402

from records import catalog, datasheets  # noqa: E402
from records.paths import REPO_ROOT  # noqa: E402
from records.record import RecordError  # noqa: E402

datasheets.require()  # the modules below read it as they load: a nan peak is one line, not MkDocs' traceback
from website import markers, notebooks, page_safety, render, search, site_pages  # noqa: E402
from website.markers import MarkerError  # noqa: E402

TOPIC_SEARCH_BOOST = 4
TOOL_PAGES = ("calculators.md", "sizing.md", "cheat-sheet.md")  # found by search, ranked below the answers
TOOL_SEARCH_BOOST = 0.5


def _card_configs(config) -> dict:
    """The site's Markdown settings without the glossary appended to every fragment: a practice card gets
    only the glossary lines of the terms it contains (``_glossary_for``). Parsing all of it for each of
    about 200 cards was most of a build's card time; the HTML is the same, since a term the fragment
    does not contain gives no tooltip."""
    configs = {name: dict(options) for name, options in config["mdx_configs"].items()}
    configs.setdefault("pymdownx.snippets", {})["auto_append"] = []
    return configs


def _glossary_for(text: str) -> str:
    """The glossary's definitions of the terms that occur in ``text``, as abbreviation lines to append."""
    lines = [f"*[{term}]: {meaning}" for term, meaning in site_pages.glossary_terms() if term in text]
    return "\n\n" + "\n".join(lines) + "\n" if lines else ""


@event_priority(100)  # before mkdocs-jupyter, so it turns the demo sources into notebook pages
def on_files(files, config):
    unsafe = page_safety.problems()  # an include from outside, a link, a script: nothing is built
    if unsafe:
        raise PluginError(unsafe[0] + (f" (and {len(unsafe) - 1} more; python -m scripts.check lists them)"
                                       if len(unsafe) > 1 else ""))
    try:
        for demo in catalog.discover().values():
            src_uri = render.demo_src_uri(demo)
            files.append(File(src_uri, src_dir=str(REPO_ROOT), dest_dir=config["site_dir"],
                              use_directory_urls=config["use_directory_urls"]))
            # a notebook that runs in a fresh Jupyter: kernelspec, a setup cell, a last cell keeping the record
            notebook = notebooks.downloadable_notebook(demo, jupytext.writes(jupytext.read(demo.path), fmt="ipynb"))
            files.append(File.generated(config, src_uri.removesuffix(".py") + ".ipynb", content=notebook))
        for path, svg in render.plot_files({demo: catalog.load_records(demo) for demo in catalog.discover()}):
            files.append(File.generated(config, path, content=svg))
        # the chip figures the calculators read (records/datasheets.toml; mkdocs.yml loads it before them)
        files.append(File.generated(config, site_pages.DATASHEETS_JS, content=site_pages.datasheets_js()))
    except (RecordError, ValueError) as e:
        raise PluginError(str(e)) from None
    return files


@event_priority(100)  # before the tags plugin reads page.meta
def on_page_markdown(markdown, page, config, files):
    src_uri = page.file.src_uri
    stray = markers.strays(markdown, src_uri) if src_uri.endswith(".md") else []  # a typo'd marker shows as braces
    if stray:
        raise PluginError(stray[0])
    if src_uri.startswith("topics/") and page.meta.get("difficulty"):
        tags = list(page.meta.get("tags") or [])
        page.meta["tags"] = [*tags, f"difficulty: {page.meta['difficulty']}"]
        # the page that answers a question ranks above pages that only use its words (the glossary, ...)
        page.meta.setdefault("search", {}).setdefault("boost", TOPIC_SEARCH_BOOST)

    # not in the search index: titles by tag; the contributors' guide (read from the navigation): the index every
    # page loads stays under its budget (tests/test_site.py)
    if src_uri in ("tags.md", "contributing.md"):
        page.meta["search"] = {"exclude": True}
    # the tools a candidate looks for by name are found, below the topic pages that answer the question
    if src_uri in TOOL_PAGES:
        page.meta["search"] = {"boost": TOOL_SEARCH_BOOST}

    def to_html(fragment: str, topic) -> str:  # a fragment of a topic page, for practice cards
        text = render.render_page(fragment, src_uri)
        md = python_markdown.Markdown(extensions=config["markdown_extensions"], extension_configs=_card_configs(config))
        return md.convert(text + _glossary_for(text))

    try:
        return render.render_page(site_pages.expand(markdown, src_uri, to_html), src_uri)
    except (RecordError, MarkerError, ValueError) as e:
        raise PluginError(str(e)) from None


def on_page_content(html, page, config, files):
    demo = notebooks.demo_of_page(page.file.src_uri)
    # what the reader's browser gets from the page's own content, whatever path the markup took to get there
    unsafe = page_safety.html_problems(html, page.file.src_uri, scripts_allowed=demo is not None)
    if unsafe:
        raise PluginError(unsafe[0])
    html = site_pages.first_use_tooltips(html)
    if demo is None:
        return search.exclude_measured_from_search(html)  # the index holds what pages say, not record data
    html = notebooks.without_remote_scripts(html)  # nbconvert's template would import mermaid from a CDN
    # A notebook page is not indexed for search: its code is not prose, and its prose repeats the topic
    # page that links to it, which is the page a search should find.
    page.meta["search"] = {"exclude": True}
    html = notebooks.demo_page_outputs(demo, page.file.src_uri) + html  # the committed run's output, from its records
    edit_uri = config.get("edit_uri") or ""
    if edit_uri.endswith("/docs/"):  # the demo lives outside docs/, so "edit this page" must point there
        page.edit_url = edit_uri.removesuffix("docs/") + page.file.src_uri
    return notebooks.demo_page_header(demo, page.file.src_uri) + html


@event_priority(-100)  # after the theme's search plugin has written the index
def on_post_build(config):
    index = Path(config["site_dir"]) / "search" / "search_index.json"
    if index.exists():
        index.write_text(search.slim_search_index(index.read_text(encoding="utf-8")), encoding="utf-8")
