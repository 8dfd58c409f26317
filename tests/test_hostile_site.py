"""Hostile inputs to the site, the records and the check (issue 31): includes from outside docs/, script in a page or
a title, units that dodge the datasheet gate, records the renderer cannot draw or Python cannot read, claims that
can never fail, typo'd markers. Each is refused in one line naming the file; nothing is read from outside the
repository, nothing hangs, nothing prints a traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TOPIC, make_record, write_record
from records import datasheets, plausibility, record, units
from website import markers, page_safety, plots

PAYLOAD = '<img src=x onerror="window.__pwned=3">'


def errors_of(site, capsys, rec=None, page=None) -> tuple[int, list[str]]:
    if rec is not None:
        write_record(site.results, rec)
    code, _ = site(page=page) if page else site()
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return code, [line for line in captured.err.splitlines() if line.startswith("error:")]


def scratch_site(tmp_path: Path, page: str = "# Page\n", mkdocs_yml: str | None = None) -> Path:
    """A repository-shaped folder: docs/ with one page, docs/includes, exercises/, and mkdocs.yml."""
    (tmp_path / "docs" / "topics").mkdir(parents=True)
    (tmp_path / "docs" / "includes").mkdir()
    (tmp_path / "exercises" / "demo_ex").mkdir(parents=True)
    (tmp_path / "exercises" / "demo_ex" / "solution.py").write_text("def f():\n    return 1\n")
    (tmp_path / "docs" / "topics" / "t.md").write_text(page)
    (tmp_path / "mkdocs.yml").write_text(mkdocs_yml or "site_name: x\nnav:\n  - Home: index.md\n")
    return tmp_path


# -- 1. includes ------------------------------------------------------------------------------------------------
def test_the_snippets_base_is_two_folders_not_the_repository():
    """mkdocs.yml's includes resolve inside docs/includes and exercises/ only: the repository root (.git/config,
    a link at the top) is no longer a base."""
    from website.site_pages import mkdocs_config

    extensions = mkdocs_config(REPO / "mkdocs.yml")["markdown_extensions"]
    snippets = next(e["pymdownx.snippets"] for e in extensions if isinstance(e, dict) and "pymdownx.snippets" in e)
    assert snippets["base_path"] == list(page_safety.INCLUDE_BASES)


@pytest.mark.parametrize("line, expected", [
    ('--8<-- "leak2.txt"', "is in neither docs/includes nor exercises/"),  # a link at the repository's top
    ('--8<-- ".git/config"', "path '.git/config' refused; a path starts with a letter"),
    ('--8<-- "../../etc/passwd"', "refused"),
    ('--8<-- "/etc/passwd"', "refused"),
    ('--8<-- "leak.md"', "is a symbolic link"),  # docs/includes/leak.md -> /etc/hostname
    ('--8<-- "docs/includes/leak.md"', "is in neither docs/includes nor exercises/"),  # not a base-relative path
    ("--8<-- 'demo_ex/solution.py'", "only with the one-line form"),
    ("--8<--", "only with the one-line form"),  # the block form: every following line is a path
    ('-8<- "demo_ex/solution.py"', "only with the one-line form"),
])
def test_an_include_from_outside_the_two_folders_is_refused_naming_the_file(tmp_path, line, expected):
    root = scratch_site(tmp_path, f"# Page\n\n{line}\n")
    (root / "leak2.txt").symlink_to("/etc/passwd")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "docs" / "includes" / "leak.md").symlink_to("/etc/hostname")
    found = [p for p in page_safety.problems(root) if p.startswith("docs/topics/t.md:3:")]
    assert len(found) == 1 and expected in found[0], page_safety.problems(root)


def test_an_allowed_include_passes_and_its_own_includes_are_checked(tmp_path):
    root = scratch_site(tmp_path, '# Page\n\n    --8<-- "demo_ex/solution.py"\n')
    assert page_safety.problems(root) == []
    (root / "exercises" / "demo_ex" / "solution.py").write_text('# --8<-- "x"\n--8<-- "../../mkdocs.yml"\n')
    assert any("exercises/demo_ex/solution.py:2" in p for p in page_safety.problems(root))


def test_a_symbolic_link_anywhere_under_docs_or_exercises_is_refused(tmp_path):
    root = scratch_site(tmp_path)
    (root / "docs" / "assets").mkdir()
    (root / "docs" / "assets" / "leak.txt").symlink_to("/etc/passwd")  # MkDocs would copy it into site/
    (root / "exercises" / "linked").symlink_to("/etc")
    found = page_safety.problems(root)
    assert any(p.startswith("docs/assets/leak.txt: a symbolic link") for p in found), found
    assert any(p.startswith("exercises/linked: a symbolic link") for p in found), found


def test_a_published_folder_that_is_itself_a_link_is_refused(tmp_path):
    """exercises/ (or docs/, overrides/) replaced by a link to a folder outside: every include through it would
    publish that folder's files, and a walk below the link never sees the link itself."""
    root = scratch_site(tmp_path / "repo", '# Page\n\n--8<-- "secret.txt"\n')
    outside = tmp_path / "outside"
    shutil.copytree(root / "exercises", outside)
    (outside / "secret.txt").write_text("SECRET\n")
    shutil.rmtree(root / "exercises")
    (root / "exercises").symlink_to(outside)
    found = page_safety.problems(root)
    assert any(p.startswith("exercises: a symbolic link") for p in found), found
    assert any(p.startswith("docs/topics/t.md:3: include 'secret.txt' refused") for p in found), found


def test_a_byte_order_mark_hides_no_include_and_no_front_matter(tmp_path):
    """MkDocs drops a leading byte-order mark, so the include line and the front matter behind one are read."""
    root = scratch_site(tmp_path, "\ufeff--8<-- \"e.md\"\n")
    (root / "docs" / "includes" / "e.md").write_text("text\n")
    os.link(root / "docs" / "includes" / "e.md", root / "outside.md")
    assert any("has other hard links" in p for p in page_safety.problems(root)), page_safety.problems(root)
    (root / "docs" / "topics" / "t.md").write_text(f"\ufeff---\ntitle: '{PAYLOAD}'\n---\n# Page\n")
    assert any(p.startswith("docs/topics/t.md: front matter: title") for p in page_safety.problems(root))


@pytest.mark.parametrize("front, expected", [
    ('subtitle: "s\\u003cimg src=x \\u006fnerror=window.__pwned=9\\u003e"', "key 'subtitle' is not one the site reads"),
    ('status: "new"', "key 'status' is not one the site reads"),
    ('icon: "anything"', "key 'icon' is not one the site reads"),  # a template name: the build's traceback
    ('title: "\\u003cimg src=x \\u006fnerror=alert(1)\\u003e"', "front matter: title"),
    ('tags: [ok, "\\u003cb\\u003ebold\\u003c/b\\u003e"]', "front matter: tag"),
    ('cheat: "\\u003cimg src=x \\u006fnerror=alert(1)\\u003e"', "docs/topics/t.md: front matter: raw HTML"),
])
def test_front_matter_holds_only_what_the_site_reads_and_no_script(tmp_path, front, expected):
    """The theme writes front-matter fields such as subtitle and status into every page, unescaped; YAML escapes
    (\\u003c is <) hid a script from a scan of the text as written."""
    root = scratch_site(tmp_path, f"---\n{front}\n---\n# Page\n")
    found = page_safety.problems(root)
    assert any(expected in p for p in found), found


@pytest.mark.parametrize("page", [
    '--- \nsubtitle: "\\u003cimg src=x \\u006fnerror=alert(1)\\u003e"\n---\n# Page\n',  # a blank after the opener
    '---\nsubtitle: "\\u003cimg src=x \\u006fnerror=alert(1)\\u003e"\n...\n# Page\n',  # closed by '...'
    "Icon: anything\nStatus: new\n\n# Page\n",  # MultiMarkdown: a page's first 'key: value' lines
], ids=["opener with a blank", "closed by dots", "multimarkdown"])
def test_front_matter_is_read_as_mkdocs_reads_it(tmp_path, page):
    """The check once knew only '---' lines exactly; MkDocs also takes '--- ', '...' and 'Key: value' lines."""
    found = page_safety.problems(scratch_site(tmp_path, page))
    assert any("front matter key" in p and "is not one the site reads" in p for p in found), found


@pytest.mark.parametrize("front, expected", [
    ("difficulty: !!binary PGltZyBzcmM9eCBvbmVycm9yPWFsZXJ0KDEpPg==", "front matter holds a bytes value"),
    ("title: T\nreviewed: 2026-11-29", "key 'reviewed' is not one"),
    ("tags: [2026-11-29]", "front matter holds a date value"),
    # the hook makes a difficulty a tag, which the theme prints raw
    ("difficulty: '<b>hard</b>'", "front matter: difficulty '<b>hard</b>' holds markup"),
])
def test_front_matter_values_are_plain_text_numbers_and_lists(tmp_path, front, expected):
    root = scratch_site(tmp_path)
    (root / "docs" / "topics" / "sub").mkdir()  # any page, not only a topic page the check reads as one
    (root / "docs" / "topics" / "sub" / "notes.md").write_text(f"---\n{front}\n---\n# Notes\n")
    found = page_safety.problems(root)
    assert any(p.startswith("docs/topics/sub/notes.md") and expected in p for p in found), found


def test_a_file_name_a_page_address_would_carry_into_markup_is_refused(tmp_path):
    """An exercise page's file name became a practice card's link, written into innerHTML."""
    root = scratch_site(tmp_path)
    (root / "docs" / "exercises").mkdir()
    (root / "docs" / "exercises" / 'x"><img src=x onerror=alert(1)>.md').write_text("---\ntitle: X\n---\n# X\n")
    assert any("a file name holds characters" in p for p in page_safety.problems(root)), page_safety.problems(root)


def test_a_hard_linked_file_anywhere_in_docs_is_refused(tmp_path):
    root = scratch_site(tmp_path / "repo")
    outside = tmp_path / "hostname"
    outside.write_text("vm\n")
    (root / "docs" / "assets").mkdir()
    os.link(outside, root / "docs" / "assets" / "host.txt")  # published as is, never included
    found = page_safety.problems(root)
    assert any(p.startswith("docs/assets/host.txt: has other hard links") for p in found), found


def test_the_snippets_base_path_in_mkdocs_yml_is_the_checked_one(tmp_path):
    yml = ("site_name: x\nmarkdown_extensions:\n  - pymdownx.snippets:\n"
           "      base_path: [/etc/xdg/pip, docs/includes, exercises]\n")
    found = page_safety.problems(scratch_site(tmp_path, mkdocs_yml=yml))
    assert any(p.startswith("mkdocs.yml: pymdownx.snippets must have base_path") for p in found), found


def test_a_script_in_an_xml_namespace_is_script(tmp_path):
    """An SVG is copied as it is, never rendered: <svg:script> ran where the scan looked for <script> alone."""
    root = scratch_site(tmp_path)
    (root / "docs" / "assets").mkdir()
    (root / "docs" / "assets" / "x.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" xmlns:svg="http://www.w3'
                                                   '.org/2000/svg"><svg:script>alert(1)</svg:script></svg>')
    assert any(p.startswith("docs/assets/x.svg: raw HTML") for p in page_safety.problems(root))
    assert page_safety.html_problems("<svg:script>alert(1)</svg:script>", "t.md")


@pytest.mark.parametrize("name", ["assets/evil.xht", "assets/evil.xsl", "assets/evil.mht", "CNAME"])
def test_docs_holds_only_the_file_types_the_site_publishes(tmp_path, name):
    """MkDocs copies every file of docs/ into the site, and a browser runs script from more types than any list
    of markup names (.xht is XHTML to Python's mimetypes and to a web server)."""
    root = scratch_site(tmp_path)
    (root / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
    (root / "docs" / name).write_text("<html><script>alert(1)</script></html>")
    assert any(p.startswith(f"docs/{name}: the site publishes only") for p in page_safety.problems(root))


def test_a_bad_datasheet_is_one_line_in_regen_unpack_and_the_build(tmp_path, monkeypatch, capsys):
    """A nan peak stops the check in one line; the other commands read the datasheet first too (the build's modules
    read it as they load, regen's digests and unpack's gate as they go), so none prints a traceback."""
    from scripts import gpu_unpack, regen

    def nan_peak():
        raise datasheets.DatasheetError("records/datasheets.toml: [h200] memory_gbps: nan is not a finite positive "
                                        "number")

    monkeypatch.setattr(datasheets, "sheets", nan_peak)
    for main, argv in ((regen.main, ["--stale", "--results-dir", str(tmp_path)]),
                       (gpu_unpack.main, ["records.tar.gz", "--dry-run"])):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 2 and err == ["error: records/datasheets.toml: [h200] memory_gbps: nan is not a "
                                                "finite positive number"], err
    hook = ("import sys; from records import datasheets; datasheets.sheets = lambda: (_ for _ in ()).throw("
            "datasheets.DatasheetError('records/datasheets.toml: [h200] label: must be plain text')); "
            "sys.path.insert(0, 'website'); import mkdocs_hook")
    done = subprocess.run([sys.executable, "-c", hook], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: records/datasheets.toml: [h200] label: must be plain text"], done.stderr


def test_the_check_refuses_an_include_from_outside(site, capsys):
    code, errors = errors_of(site, capsys, page=TOPIC.replace("CLAIM", '--8<-- "../../../etc/passwd"'))
    assert code == 1 and any("include" in e and "t.md" in e for e in errors), errors


def test_the_build_stops_on_what_the_check_refuses(monkeypatch):
    from mkdocs.exceptions import PluginError

    sys.path.insert(0, str(REPO / "website"))
    import mkdocs_hook

    monkeypatch.setattr(page_safety, "problems", lambda root=None: ["docs/x.md:1: include 'y' refused", "two"])
    with pytest.raises(PluginError, match=r"docs/x.md:1: include 'y' refused \(and 1 more"):
        mkdocs_hook.on_files([], {})


def test_markdown_with_the_sites_snippets_cannot_read_the_repository_root(tmp_path, monkeypatch):
    """The same conversion the build does, from a folder whose root holds a secret: not found, never included."""
    import markdown
    from pymdownx.snippets import SnippetMissingError

    from website.site_pages import mkdocs_config

    root = scratch_site(tmp_path)
    (root / "secret.txt").write_text("SECRET-CONTENT")
    monkeypatch.chdir(root)
    extensions = mkdocs_config(REPO / "mkdocs.yml")["markdown_extensions"]
    config = next(e["pymdownx.snippets"] for e in extensions if isinstance(e, dict) and "pymdownx.snippets" in e)
    md = markdown.Markdown(extensions=["pymdownx.snippets"],
                           extension_configs={"pymdownx.snippets": {**config, "auto_append": []}})
    try:
        html = md.convert('--8<-- "secret.txt"\n')
    except SnippetMissingError:
        html = ""
    assert "SECRET-CONTENT" not in html


# -- 2. script in a page, a title, mkdocs.yml, a demo's prose -----------------------------------------------------
@pytest.mark.parametrize("text", [
    PAYLOAD, "<script>alert(1)</script>", '<a href="javascript:alert(1)">x</a>', "[x](javascript:alert(1))",
    'Text {: onclick="alert(1)" }', '<iframe src="https://example.com"></iframe>',
    '<meta http-equiv="refresh" content="0; url=https://example.com">', '<svg onload="alert(1)"></svg>',
])
def test_raw_html_that_runs_script_is_refused_in_a_page(tmp_path, text):
    root = scratch_site(tmp_path, f"# Page\n\n{text}\n")
    found = page_safety.problems(root)
    assert len(found) == 1 and found[0].startswith("docs/topics/t.md: raw HTML that could run script"), found


def test_script_is_refused_even_in_code_and_a_name_is_not_a_handler(tmp_path):
    """Markdown's idea of code and the check's can differ (an escaped backtick, a raw HTML block, an include that
    closes a fence), so script is refused in code too; a word like TracerBoolConversionError is no handler."""
    root = scratch_site(tmp_path, "# Page\n\nTracerBoolConversionError is a name, not a handler; extra_javascript too.\n")
    assert page_safety.problems(root) == []
    for text in (f"`{PAYLOAD}`", "```html\n<script>alert(1)</script>\n```", f"<div>`{PAYLOAD}`</div>"):
        (root / "docs" / "topics" / "t.md").write_text(f"# Page\n\n{text}\n")
        assert page_safety.problems(root), text


@pytest.mark.parametrize("text", [
    "<p><img src=x onerror=(window.h1=1)></p>", "<img src=x onerror=[1].map(alert)>", "{: #p onmouseover=(alert)(1) }",
    '<a href="jav&#x61;script:alert(1)">x</a>', '<a href="java&#9;script:alert(1)">x</a>',
    "[x](javascript&colon;alert(1))", '<a href="java\nscript:alert(1)">x</a>', '<a href=" javascript:alert(1)">x</a>',
    '<svg><animate attributeName="href" values="javas&#99;ript:alert(1)"/></svg>', '<form action="https://x.example">',
    '<a href="data:text/html,<script>alert(1)</script>">x</a>',
])
def test_obfuscated_script_is_refused(tmp_path, text):
    root = scratch_site(tmp_path, f"# Page\n\n{text}\n")
    assert any(p.startswith("docs/topics/t.md: raw HTML") for p in page_safety.problems(root)), text


def test_script_in_mkdocs_yml_is_found_after_yaml_decodes_it(tmp_path):
    yml = 'site_name: x\ncopyright: "text \\x3cimg src=x onerror\\x3dwindow.h24=1\\x3e"\nnav:\n  - Home: index.md\n'
    root = scratch_site(tmp_path, mkdocs_yml=yml)
    assert any(p.startswith("mkdocs.yml: raw HTML") for p in page_safety.problems(root))


@pytest.mark.parametrize("name", ["results/rt.html", "rt.markdown", "assets/rt.xhtml", "assets/rt.SVG", "rt.HTML"])
def test_every_file_mkdocs_publishes_is_scanned(tmp_path, name):
    root = scratch_site(tmp_path)
    (root / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
    (root / "docs" / name).write_text(f"<p>{PAYLOAD}</p>")
    assert any(p.startswith(f"docs/{name}: raw HTML") for p in page_safety.problems(root))


def test_includes_are_followed_to_any_depth_and_a_hard_link_is_refused(tmp_path):
    root = scratch_site(tmp_path, '# Page\n\n--8<-- "a.md"\n')
    inc = root / "docs" / "includes"
    for this, following in (("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")):
        (inc / f"{this}.md").write_text(f'--8<-- "{following}.md"\n')
    (inc / "e.md").write_text(f"<p>{PAYLOAD}</p>\n")
    assert any(p.startswith("docs/includes/e.md: raw HTML") for p in page_safety.problems(root))
    (inc / "e.md").write_text("text\n")
    os.link(inc / "e.md", root / "outside.md")  # a hard link is a regular file: one from /etc would be too
    assert any("has other hard links" in p for p in page_safety.problems(root))


@pytest.mark.parametrize("content, allowed", [
    (f"<p>{PAYLOAD}</p>", False), ('<p><a href="jav&#x61;script:alert(1)">x</a></p>', False),
    ('<p id="p" onmouseover="x()">t</p>', False), ("<script>alert(1)</script>", False),
    ("<script>var notebook = 1;</script>", True), ('<form id="f"><input name="a"></form>', False),
    ('<script type="application/json" id="mm-cards">[]</script>', False),  # practice cards: data, never run
    ('<form action="https://x.example"></form>', True), ('<iframe src="/x"></iframe>', True),
])
def test_the_build_refuses_a_rendered_page_that_could_run_script(content, allowed):
    """The build's last word (the hook's on_page_content), whatever path the markup took: scripts only on a demo's
    notebook page (its template's), never a handler, a script address, an embedding tag or a form's action."""
    found = page_safety.html_problems(content, "topics/t.md", scripts_allowed=allowed)
    expect_refused = content not in ("<script>var notebook = 1;</script>", '<form id="f"><input name="a"></form>',
                                     '<script type="application/json" id="mm-cards">[]</script>')
    assert bool(found) == expect_refused, (content, found)


def test_a_title_with_markup_is_refused_in_the_nav_and_the_front_matter(tmp_path):
    nav = f"site_name: x\nnav:\n  - '{PAYLOAD}': topics/t.md\n"
    root = scratch_site(tmp_path, f"---\ntitle: '{PAYLOAD}'\n---\n# Page\n", mkdocs_yml=nav)
    found = page_safety.problems(root)
    assert any(p.startswith("mkdocs.yml") for p in found), found
    assert any(p.startswith("docs/topics/t.md: front matter: title") for p in found), found
    assert any("{{" in p for p in page_safety.title_problems("{{ results x }}", "t"))


def test_script_in_a_demos_prose_is_refused(tmp_path):
    root = scratch_site(tmp_path)
    (root / "demos" / "t1").mkdir(parents=True)
    (root / "demos" / "t1" / "d.py").write_text(f"# %% [markdown]\n# # Title {PAYLOAD}\n\n# %%\nx = 1\n")
    assert any(p.startswith("demos/t1/d.py: raw HTML") for p in page_safety.problems(root))


def test_the_real_site_passes():
    assert page_safety.problems() == []


# -- 3. units and the datasheet gate -----------------------------------------------------------------------------
HOSTILE_UNITS = ["GB\u200b/s", "G\u0412/s", "TFL\u041eP/s", "GB\uff0fs", "GB\u00a0/s", "TOPS", "TFLOPS", "GB/ms",
                 "B/ns", "Gbit/s", "GBps", "GB/s ", "Gb/s"]


@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_a_unit_outside_the_closed_list_is_refused(unit):
    rec = make_record(device_class="h100")
    rec["metrics"]["chain.eager.gbps"] = {"value": 99_999.0, "unit": unit}
    problems = record.validate(rec)
    assert any(p.startswith("metrics.chain.eager.gbps.unit:") for p in problems), problems


def test_every_committed_unit_is_in_the_closed_list_and_ascii():
    assert all(u.isascii() and u.isprintable() for u in units.UNITS)
    for path in sorted((REPO / "docs" / "results").glob("*/*.json")):
        rec = json.loads(path.read_text())
        assert all(m["unit"] in units.UNITS for m in rec["metrics"].values()), path


@pytest.mark.parametrize("fields", [{"kind": "cache"}, {"cache_resident": True}])
def test_a_cache_resident_rate_is_bounded_by_the_caches(fields):
    rec = make_record(device_class="h100")
    rec["metrics"]["chain.eager.gbps"] = {"value": 1e6, "unit": "GB/s", **fields}
    problems = plausibility.vet(record.parse(rec), "x.json")
    assert any("exceeds the H100 datasheet cache bandwidth" in p for p in problems), problems
    rec["metrics"]["chain.eager.gbps"]["value"] = 20_000.0  # above HBM, below the SMs' L1: a cache can do this
    assert not any("chain.eager.gbps" in p for p in plausibility.vet(record.parse(rec), "x.json"))


@pytest.mark.parametrize("entry, expected", [
    ({"memory_gbps": float("nan")}, "memory_gbps: nan is not a finite positive number"),
    ({"memory_gbps": -1.0}, "memory_gbps: -1.0 is not a finite positive number"),
    ({"tflops": {"bfloat16": float("inf")}}, "tflops.bfloat16: inf is not a finite positive number"),
    ({"tflops": {"bfloat16": "990"}}, "tflops.bfloat16: '990' is not a finite positive number"),
    ({"source": ""}, "source: missing"),
    ({"label": "$\\frac{$"}, "label: '$\\\\frac{$' must be plain text"),
    ({"label": PAYLOAD}, "must be plain text"),
    ({"host_link_gbps": float("nan")}, "host_link_gbps: nan is not a finite positive number"),
    ({"nvlink_gbps": float("nan")}, "nvlink_gbps: nan is not a finite positive number"),
])
def test_a_datasheet_entry_that_bounds_nothing_is_refused(entry, expected):
    sheet = {"label": "H100", "memory_gbps": 3350.0, "tflops": {"bfloat16": 989.4}, "source": "datasheet", **entry}
    found = datasheets.problems({"h100": sheet})
    assert any(expected in p for p in found), found


def test_a_datasheet_with_a_nan_peak_stops_the_check_in_one_line(tmp_path, monkeypatch):
    bad = tmp_path / "records"
    bad.mkdir()
    text = (REPO / "records" / "datasheets.toml").read_text().replace("memory_gbps = 3350.0", "memory_gbps = nan", 1)
    (bad / "datasheets.toml").write_text(text)
    with pytest.raises(datasheets.DatasheetError, match=r"^records/datasheets.toml: \[h100\] memory_gbps: nan"):
        datasheets.load(tmp_path)


@pytest.mark.parametrize("spoil, says", [
    (lambda data: data.replace(b"memory_gbps = 3350.0", b"memory_gbps = 1" + b"0" * 400, 1), "is not a finite"),
    (lambda data: data.replace(b"memory_gbps = 3350.0", b"memory_gbps = 1" + b"0" * 5000, 1), "not valid TOML"),
    (lambda data: data + b"\xff", "not valid TOML (UnicodeDecodeError"),
    (lambda data: data + b"deep = " + b"[" * 5000 + b"]" * 5000 + b"\n", "not valid TOML (RecursionError"),
    (None, "cannot be read (No such file or directory)"),
    (lambda data: data.replace(b"memory_gbps = 3350.0", b"memory_gbps = 0x" + b"f" * 4000, 1), "an integer of"),
    (lambda data: data.replace(b"memory_gb = 80\n", b"memory_gb = \"eighty\"\n", 1), "memory_gb: 'eighty' is not"),
    (lambda data: data.replace(b"[h100]", b"[h100x]", 1), "[h100]: missing; the code reads it by name"),
    (lambda data: data.replace(b"[cpu]\n", b"[cpu]\nreviewed = 2026-11-29\n", 1), "reviewed: not a field"),
    (lambda data: re.sub(rb"(\[h200\]\n(?:(?!\[).*\n)*?)tflops = .*\n", rb"\1", data, count=1),
     "[h200] tflops: missing"),  # the cheat sheet's machine balance read it: a KeyError traceback in the build
], ids=["10**400", "5000 digits", "not utf-8", "deep", "missing", "hex digits", "text size", "no h100", "a date",
        "h200 without tflops"])
def test_a_datasheet_file_that_cannot_be_read_is_one_line(tmp_path, spoil, says):
    (tmp_path / "records").mkdir()
    if spoil is not None:
        data = spoil((REPO / "records" / "datasheets.toml").read_bytes())
        (tmp_path / "records" / "datasheets.toml").write_bytes(data)
    with pytest.raises(datasheets.DatasheetError, match=r"^records/datasheets.toml: ") as refused:
        datasheets.load(tmp_path)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_the_committed_datasheets_are_valid():
    assert datasheets.problems(datasheets.load()) == []


# -- 4 and 5. records the renderer cannot draw, or Python cannot read ------------------------------------------
@pytest.mark.parametrize("mutate, field", [
    (lambda r: r.__setitem__("wall_time_s", 10**400), "wall_time_s: out of range"),
    (lambda r: r["series"][0]["lines"][0].__setitem__("y", [1e308, -1e308]), "series[0].lines[0].y[0]: out of range"),
    (lambda r: r["metrics"]["chain.eager.gbps"].__setitem__("value", 1e101), "metrics.chain.eager.gbps.value: out of"),
])
def test_numbers_beyond_what_a_page_can_draw_are_refused(mutate, field):
    rec = make_record()
    mutate(rec)
    assert any(p.startswith(field) for p in record.validate(rec)), record.validate(rec)


def test_a_dollar_in_a_plot_text_is_a_dollar_sign():
    series = {"name": "a", "title": "$\\frac{a}{ $", "x_label": "$", "y_label": "y", "x_log": True, "y_log": True,
              "lines": [{"label": "$\\frac{$", "x": [1.0, 2.0], "y": [1e-100, 1e100]}]}
    assert "frac" in plots.series_svg(series, "H$100")


@pytest.mark.parametrize("text, expected", [
    ("[" * 2000 + "]" * 2000, "nested too deeply"),
    ('{"a": ' + "9" * 5000 + "}", "an integer of 5,000 digits"),
    ('{"a": 1, "a": 2}', 'the key "a" appears twice'),
    ("\ufeff{}", "not valid JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
])
def test_unreadable_json_is_one_line(text, expected):
    with pytest.raises(record.RecordError) as e:
        record.loads(text, "x.json")
    assert str(e.value).startswith("x.json: ") and expected in str(e.value) and "\n" not in str(e.value)


def test_a_duplicate_metric_cannot_hide_a_second_value():
    rec = json.dumps(make_record())
    hidden = rec.replace('"chain.eager.gbps": {', '"chain.eager.gbps": {"value": 1, "unit": "GB/s"}, '
                                                  '"chain.eager.gbps": {', 1)
    with pytest.raises(record.RecordError, match="appears twice"):
        record.loads(hidden, "x.json")


def _hostile_files(folder: Path) -> dict[str, str]:
    """A record of each kind that once hung or crashed a reader, and what its one line says."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(folder / "fifo.json")
    (folder / "deep.json").write_text("[" * 2000 + "]" * 2000)
    (folder / "digits.json").write_text('{"a": ' + "9" * 5000 + "}")
    (folder / "big.json").write_text('{"a": 1' + "0" * 400 + "}")  # 10**400: no float holds it
    (folder / "huge.json").write_bytes(b" " * (record.MAX_BYTES + 1))
    return {"zero.json": "symbolic link", "fifo.json": "not a regular file", "deep.json": "nested too deeply",
            "digits.json": "an integer of 5,000 digits",
            "big.json": "an integer of 401 digits", "huge.json": "a record is at most"}


def test_a_link_to_dev_zero_a_fifo_and_a_huge_file_are_refused_without_reading(tmp_path):
    for name, expected in _hostile_files(tmp_path).items():
        started = time.monotonic()
        with pytest.raises(record.RecordError, match=expected):
            record.load(tmp_path / name)
        assert time.monotonic() - started < 30, name  # a hang guard, not a timing


def test_the_check_names_each_hostile_record_in_one_line(site, capsys):
    folder = site.results / "kernel_fusion"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cpu.json").unlink()  # replaced by a hostile one: the readers hash it as an input
    names = {"zero.json": "h100.json", "fifo.json": "h200.json", "deep.json": "a100.json", "digits.json": "l4.json",
             "huge.json": "l40s.json", "big.json": "cpu.json"}
    staging = folder.parent / "staging"
    for name, expected in _hostile_files(staging).items():
        (staging / name).rename(folder / names[name])
    code, errors = errors_of(site, capsys)
    assert code == 2, errors
    for target in names.values():
        assert sum(f"kernel_fusion/{target}" in line for line in errors) == 1, errors


def test_regen_counts_a_hostile_record_as_missing_without_reading_it(tmp_path):
    from records import catalog

    demo = catalog.discover()["kernel_fusion"]
    folder = tmp_path / "kernel_fusion"
    for name in _hostile_files(tmp_path / "staging"):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        (tmp_path / "staging" / name).rename(folder / "cpu.json")
        assert catalog.record_freshness(demo, "cpu", tmp_path) == "missing"


# -- 10. records: commits, dates, device kinds, signs, sizes ------------------------------------------------------
@pytest.mark.parametrize("mutate, field", [
    (lambda r: r["provenance"].__setitem__("commit", "0000"), "provenance.commit"),
    (lambda r: r["provenance"].__setitem__("commit", "0" * 40), "provenance.commit: all zeros"),
    (lambda r: r["provenance"].__setitem__("utc", "9999-99-99T00:00:00Z"), "provenance.utc"),
    (lambda r: r["provenance"].__setitem__("utc", "2999-01-01T00:00:00Z"), "provenance.utc"),
    (lambda r: r["provenance"].__setitem__("device_kind", "cuda"), "provenance.device_kind"),
    (lambda r: r["tables"][0].__setitem__("rows", [["a", 1.0]] * 2001), "tables[0].rows: 2,001 items; at most 2,000"),
    (lambda r: r["tables"][0].__setitem__("rows", [["a", 1.0]] * 300_000), "tables[0].rows: 300,000 items; at most"),
    (lambda r: r["series"][0]["lines"][0].update(x=[1.0] * 20001, y=[1.0] * 20001),
     "series[0].lines[0].x: 20,001 items; at most 20,000"),
])
def test_implausible_provenance_and_unbounded_tables_are_refused(mutate, field):
    rec = make_record()
    mutate(rec)
    assert any(p.startswith(field) for p in record.validate(rec)), record.validate(rec)


def test_a_commit_outside_the_history_is_refused(site, capsys):
    rec = make_record(source_digest=site.digest)
    rec["provenance"]["commit"] = "f" * 40
    code, errors = errors_of(site, capsys, rec)
    assert code == 1 and any("is not a commit of this repository's history" in e for e in errors), errors


@pytest.mark.parametrize("unit, value", [("ms", -1.0), ("x", -0.5), ("us", -0.02), ("GB", -3.0)])
def test_a_negative_time_size_or_speedup_is_refused_unless_signed(unit, value):
    rec = make_record()
    rec["metrics"]["m"] = {"value": value, "unit": unit}
    assert any("metrics.m" in p and "cannot be negative" in p for p in plausibility.vet(record.parse(rec), "x.json"))
    rec["metrics"]["m"]["signed"] = True  # a fitted slope or a difference says what it is
    assert not any("metrics.m" in p for p in plausibility.vet(record.parse(rec), "x.json"))


# -- 10. claims and markers -------------------------------------------------------------------------------------
@pytest.mark.parametrize("claim", ["1 < 2", "chain.eager.gbps < 1e999", "0 * chain.eager.gbps < 1",
                                   "chain.eager.gbps <= chain.eager.gbps", "nan * chain.eager.gbps < 1"])
def test_a_claim_that_can_never_be_contradicted_is_refused(site, capsys, claim):
    code, errors = errors_of(site, capsys, page=TOPIC.replace("CLAIM", f"{{{{ claim kernel_fusion @cpu {claim} }}}}"))
    assert code == 1 and len([e for e in errors if "claim" in e]) == 1, errors


@pytest.mark.parametrize("text", ["{{ metrc kernel_fusion chain.eager.gbps @cpu }}",
                                  "{{ metric kernel_fusion\nchain.eager.gbps @cpu }}", "{{ results kernel_fusion"])
def test_a_typod_or_split_marker_is_an_error_not_literal_text(site, capsys, text):
    code, errors = errors_of(site, capsys, page=TOPIC.replace("CLAIM", text))
    assert code == 1 and any("holds braces that are no marker" in e for e in errors), errors
    long_line = TOPIC.replace("CLAIM", "A sentence long enough to push a marker past sixty characters: " + text)
    code, errors = errors_of(site, capsys, page=long_line)
    assert any(text.split("\n")[0][:30] in e for e in errors), errors  # quoted around the brace, not from the start


def test_markers_in_code_are_left_alone():
    assert markers.strays("`{{ metrc x }}`\n\n```\n{{ y\n```\n") == []


def test_check_on_an_empty_docs_folder_fails(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "scripts.check", "--docs-dir", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "no topic pages" in proc.stderr and "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.startswith("error:")]) == 1


# -- what a second red-team pass found ----------------------------------------------------------------------------
@pytest.mark.parametrize("mutate, field", [
    (lambda r: r["provenance"].__setitem__("commit", "deadbeef" * 5 + "\n"), "provenance.commit"),
    (lambda r: r["metrics"].__setitem__("x\n", {"value": 1.0, "unit": "x"}), "metrics key"),
    (lambda r: r["ceilings"]["copy_bandwidth"].__setitem__("samples", [20.0, -1.0]), "ceilings.copy_bandwidth"),
    (lambda r: r["ceilings"]["copy_bandwidth"].__setitem__("samples", [20.0]), "ceilings.copy_bandwidth"),
])
def test_a_trailing_newline_or_a_lone_ceiling_sample_is_refused(mutate, field):
    rec = make_record()
    mutate(rec)
    assert any(p.startswith(field) for p in record.validate(rec)), record.validate(rec)


def test_a_record_whose_only_checks_are_expected_failures_has_no_check():
    rec = make_record()
    rec["checks"] = [{"name": "wrong on purpose", "passed": True, "detail": "fails", "expected_failure": True}]
    assert any("no correctness check" in p for p in plausibility.vet(record.parse(rec), "x.json"))


@pytest.mark.parametrize("claim", ["chain.eager.gbps <= 1e100", "chain.eager.gbps >= -1e100",
                                   "5e-324 * chain.eager.gbps < 1"])
def test_a_bound_beyond_what_a_record_can_hold_is_refused(claim):
    with pytest.raises(markers.MarkerError, match="hold whatever is measured"):
        markers.find(f"{{{{ claim kernel_fusion @cpu {claim} }}}}")


def test_a_page_that_is_not_utf8_is_one_line(site, capsys):
    site()
    (site.docs / "topics" / "bad.md").write_bytes(b"# Page \xff\xfe\n")
    code, errors = errors_of(site, capsys)
    assert code == 1 and any("bad.md: cannot be read as UTF-8" in e for e in errors), errors


def test_invalid_yaml_in_mkdocs_yml_is_one_line(tmp_path):
    root = scratch_site(tmp_path, mkdocs_yml="site_name: [unclosed\n")
    assert [p for p in page_safety.problems(root) if p.startswith("mkdocs.yml: not valid YAML")]


def test_the_hook_refuses_a_rendered_page_with_a_handler():
    from types import SimpleNamespace

    from mkdocs.exceptions import PluginError

    sys.path.insert(0, str(REPO / "website"))
    import mkdocs_hook

    page = SimpleNamespace(file=SimpleNamespace(src_uri="topics/t.md"), meta={})
    with pytest.raises(PluginError, match="topics/t.md: the rendered page holds <img onerror"):
        mkdocs_hook.on_page_content(f"<p>{PAYLOAD}</p>", page, {}, [])
