"""What the site may publish: files from inside the repository, includes from two folders, no script a contributor
wrote. The check and the site build both ask ``problems()``; each problem is one line naming the file.

- **Includes** (pymdownx.snippets, ``--8<--``): only the one-line form ``--8<-- "path"``, resolved the way
  mkdocs.yml's ``base_path`` resolves it (docs/includes, then exercises/), to a regular file inside that folder
  with no symbolic link on the way, and the included file's own include lines obey the same rule. Snippets
  follows links and, with the repository root as a base, published .git/config and /etc/passwd.
- **Links**: no symbolic link anywhere under docs/, exercises/ or overrides/, nor those folders themselves
  (MkDocs copies what a link points to, and the pages' includes read through them).
- **Script**: no ``<script>``, event handler attribute (``onerror=``), ``javascript:`` address or embedding tag
  (iframe, object, embed, base, a form's action, meta refresh) in a page, an included file, a demo file (its
  notebook page) or mkdocs.yml; and no markup at all in a navigation title or a page's front-matter title or tag,
  which the theme writes into pages unescaped. Code is scanned too: an include inside a fence can close it, and
  Markdown's idea of code and a scanner's differ. The build also refuses a rendered page's content that holds any
  of it.
- **Front matter**: only the keys the site reads (the theme writes others, such as ``subtitle`` or ``status``,
  into every page, and ``icon`` names a template); every string in it scanned as YAML decodes it (``\\u003c`` is
  ``<``).
- **Encoding**: a page is read as MkDocs reads it, a leading byte-order mark dropped (kept, it hid an include line
  and the front matter from this check while MkDocs still read them).
"""

from __future__ import annotations

import html
import os
import re
import stat
from html.parser import HTMLParser
from pathlib import Path

import yaml

from records.paths import REPO_ROOT
from records.errors import quoted
from website.markers import MARKUP

INCLUDE_BASES = ("docs/includes", "exercises")  # mkdocs.yml: pymdownx.snippets base_path, in this order
PUBLISHED_TREES = ("docs", "exercises", "overrides")
SNIPPET_LINE = re.compile(r"[ \t]*-+8<-+")  # a line pymdownx.snippets reads as an include (`;--8<--` is escaped text)
ALLOWED_INCLUDE = re.compile(r'\s*--8<-- "([A-Za-z0-9_][A-Za-z0-9_.\-/]*)"\s*')
PLAIN_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\-]*")  # a file or folder name under a published tree
ONE_LINE_INCLUDE = re.compile(r'\s*--8<-- "([^"]*)"\s*')  # the form, whatever the path holds
# the front-matter keys the site reads: topic pages (website/site_pages.py), exercises (sketch), home (hide)
FRONT_MATTER_KEYS = ("title", "topic", "difficulty", "tags", "demos", "cheat", "sketch", "hide")
SCRIPT = re.compile(
    # tags that run or load something, in any XML namespace too (<svg:script>)
    r"<\s*/?\s*(?:[\w.-]+:)?(script|iframe|frame|object|embed|base|applet)\b"
    r"|\bon[a-z]{3,}\s*="  # an event handler attribute: onerror=, onload=, onclick= (also in {: ... }), any value
    r"|\bhttp-equiv\s*=\s*[\"']?refresh"  # a redirect
    r"|\b(srcdoc|formaction|action)\s*=", re.I)
# A script address, looked for after HTML entities are decoded and every space and control character is dropped
# (a browser ignores them there: jav&#x61;script:, java&#9;script:, javascript&colon;, java<newline>script:).
SCRIPT_ADDRESS = re.compile(r"(?<![a-z0-9_])((java|vb)script:|data:text/html)", re.I)
# The pages MkDocs renders or copies as they are: what a browser would treat as markup (any letter case).
MARKUP_SUFFIXES = {".md", ".markdown", ".mdown", ".mkd", ".html", ".htm", ".xhtml", ".shtml", ".svg", ".xml",
                   ".yml", ".yaml", ".txt"}
# What docs/ may hold at all (MkDocs publishes every file there, and a browser runs script from more types than any
# list of markup names: .xht, .xsl, .mht): pages, records, images, and the site's own .js and .css, which are code
# and reviewed as code. Markup among them is scanned.
PUBLISHED_SUFFIXES = {".md", ".html", ".svg", ".yml", ".txt", ".json", ".css", ".js", ".png", ".jpg", ".jpeg", ".gif",
                      ".webp", ".ico"}


def script_problems(scanned: str, where: str) -> list[str]:
    """Raw HTML that could run script or post a form, anywhere in a text (code included: Markdown's idea of what is
    code and this check's can differ, and an include inside a fence can close it)."""
    found = SCRIPT.search(scanned) or SCRIPT.search(html.unescape(scanned))
    if found is None:
        squeezed = re.sub(r"[\x00-\x20]+", "", html.unescape(html.unescape(scanned)))
        found = SCRIPT_ADDRESS.search(squeezed)
    return [f"{where}: raw HTML that could run script ({found.group(0).strip()!r}); rephrase it, or show it "
            "without the markup"] if found else []


class _HtmlScan(HTMLParser):
    """Every element of a rendered page that could run script or post a form."""

    URL_ATTRIBUTES = {"href", "src", "xlink:href", "values", "data", "poster", "background", "to", "from", "by"}
    TAGS = {"iframe", "frame", "object", "embed", "base", "applet"}

    def __init__(self, scripts_allowed: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts_allowed, self.found = scripts_allowed, []

    def handle_starttag(self, tag, attrs):
        tag = tag.rpartition(":")[2]  # <svg:script> is a script in an XML namespace
        data_only = tag == "script" and dict(attrs).get("type") == "application/json"  # a browser never runs it
        if (tag == "script" and not self.scripts_allowed and not data_only) or tag in self.TAGS:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            value = re.sub(r"[\x00-\x20]+", "", value or "")
            if name.startswith("on") or name in ("srcdoc", "formaction", "action") \
                    or (name == "http-equiv" and value.lower() == "refresh") \
                    or (name in self.URL_ATTRIBUTES and SCRIPT_ADDRESS.search(html.unescape(value))):
                self.found.append(f"<{tag} {name}=...>")


def html_problems(rendered: str, where: str, scripts_allowed: bool = False) -> list[str]:
    """What the build refuses in a page's rendered content (the Markdown's HTML, before the theme wraps it): an
    event handler, a script address, an embedding tag, a form's action, and a script unless the page is a demo's notebook
    (whose template brings its own). Whatever path the markup took (an include inside a fence, attr_list, an
    escaped backtick, a raw HTML block), this is what a reader's browser would get."""
    scan = _HtmlScan(scripts_allowed)
    scan.feed(rendered)
    return [f"{where}: the rendered page holds {found}, which could run script or post a form; remove it from "
            "the page or what it includes" for found in scan.found[:1]]


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _regular_inside(path: Path, base: Path) -> str | None:
    """Why ``path`` (under ``base``) may not be read, or None: every component a real folder or file, no link, and
    the last one a regular file."""
    current = base
    for part in path.relative_to(base).parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return "does not exist"
        if stat.S_ISLNK(mode):
            return f"{current.relative_to(REPO_ROOT).as_posix() if _within(current, REPO_ROOT) else current} is a " \
                   "symbolic link"
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_nlink > 1:  # a hard link to /etc/passwd is a regular file too; git never makes one
        return "has other hard links (it may be a file from outside the repository)"
    return None


def resolve_include(name: str, root: Path = REPO_ROOT) -> tuple[Path | None, str]:
    """The file an allowed include names (the first base that holds it, as snippets looks), or None and why."""
    if ".." in Path(name).parts or name.startswith("/"):
        return None, "leaves its folder"
    reason = "is in neither docs/includes nor exercises/"
    for base in INCLUDE_BASES:
        folder = root / base
        candidate = folder / name
        if not os.path.lexists(candidate):
            continue
        why = _regular_inside(candidate, root)  # from the repository: the base itself may be a link
        if why is not None:
            return None, why
        if not _within(candidate.resolve(), folder.resolve()):
            return None, "leaves its folder"
        return candidate, ""
    return None, reason


def include_problems(text: str, where: str, root: Path = REPO_ROOT, seen: set | None = None) -> list[str]:
    """Every include line of ``text`` that is not an allowed one, and the problems of the files it includes, at any
    depth (each file once)."""
    seen = set() if seen is None else seen
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        if not SNIPPET_LINE.match(line):
            continue
        at = f"{where}:{number}"
        m = ALLOWED_INCLUDE.fullmatch(line)
        if not m and ONE_LINE_INCLUDE.fullmatch(line):
            problems.append(f"{at}: include path {ONE_LINE_INCLUDE.fullmatch(line).group(1)[:80]!r} refused; a path "
                            "starts with a letter, digit or _ and holds only those, '.', '-' and '/'")
            continue
        if not m:
            problems.append(f"{at}: include line {line.strip()[:80]!r} refused; the site includes only with the one-line "
                            f'form --8<-- "path" (a file in {" or ".join(INCLUDE_BASES)})')
            continue
        target, why = resolve_include(m.group(1), root)
        if target is None:
            problems.append(f"{at}: include {m.group(1)!r} refused: it {why}; the site includes only regular files "
                            f"inside {' or '.join(INCLUDE_BASES)}, never through a symbolic link")
        elif target not in seen:
            seen.add(target)
            inner = read_page(target)
            problems += include_problems(inner, target.relative_to(root).as_posix(), root, seen)
            problems += script_problems(inner, target.relative_to(root).as_posix())
    return problems


def link_problems(root: Path = REPO_ROOT) -> list[str]:
    """Every symbolic link, file with other hard links (ln /etc/hostname docs/assets/x.txt publishes it; git never
    makes one) and file name a URL would carry into a page's markup, in the folders the site publishes or includes
    from."""
    found = []
    for tree in PUBLISHED_TREES:
        if (root / tree).is_symlink():  # os.walk would follow it: everything under it comes from elsewhere
            found.append(f"{tree}: a symbolic link; the site publishes and includes regular files only (make it "
                         "the folder itself)")
            continue
        for folder, dirs, files in os.walk(root / tree):  # os.walk never descends into a linked folder
            for name in sorted(dirs + files):
                path = Path(folder) / name
                where = path.relative_to(root).as_posix()
                if path.is_symlink():
                    found.append(f"{where}: a symbolic link; the site publishes and includes regular files only "
                                 "(replace it with the file itself)")
                elif name in files and os.lstat(path).st_nlink > 1:
                    found.append(f"{where}: has other hard links (it may be a file from outside the repository)")
                if not PLAIN_NAME.fullmatch(name):
                    found.append(f"{quoted(where)}: a file name holds characters other than letters, digits, '_', "
                                 "'.' and '-' (a page's address carries it into links and markup)")
    return sorted(found)


def title_problems(title, where: str, what: str = "title") -> list[str]:
    """A title (or a tag, a difficulty) the theme writes unescaped (navigation, page heading, tags): plain text."""
    if not isinstance(title, str):
        return [f"{where}: the {what} must be text, got {type(title).__name__}"]
    if MARKUP.search(title) or any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in title):
        return [f"{where}: {what} {title[:60]!r} holds markup or control characters (< > [ ] {{ }} ` \\ or a line "
                f"break); a {what} is plain text"]
    return []


def read_page(path: Path) -> str:
    """A page's text as MkDocs reads it: UTF-8 with a leading byte-order mark dropped."""
    return path.read_text(encoding="utf-8-sig", errors="replace")


def front_matter_problems(meta: dict, where: str) -> list[str]:
    """Front matter the theme would write into pages: keys the site does not read, markup in the title or a tag,
    script in any of its strings (as YAML decodes them)."""
    found = [f"{where}: front matter key {str(key)[:40]!r} is not one the site reads ({', '.join(FRONT_MATTER_KEYS)}; "
             "MkDocs also takes a page's first 'key: value' lines for front matter)"
             for key in meta if key not in FRONT_MATTER_KEYS][:1]
    odd = [value for value in _values(meta) if not isinstance(value, (str, int, float, bool, list, dict, type(None)))]
    if odd:  # !!binary gives bytes, a bare date a date: neither is scanned as text, and the theme prints them
        found.append(f"{where}: front matter holds a {type(odd[0]).__name__} value; use text, numbers and lists")
    for key in ("title", "topic", "difficulty"):  # the theme and the tags (difficulty becomes one) print them raw
        if key in meta:
            found += title_problems(meta[key], f"{where}: front matter", key)
    for key in ("tags", "demos"):
        items = meta.get(key, [])
        for item in items if isinstance(items, list) else [items]:
            found += title_problems(item, f"{where}: front matter", key[:-1])
    return found + script_problems("\n".join(_strings(meta)), f"{where}: front matter")


def _values(node) -> list:
    """Every leaf value of parsed YAML, keys included."""
    if isinstance(node, dict):
        return [v for k, value in node.items() for v in [*_values(k), *_values(value)]]
    if isinstance(node, list):
        return [v for item in node for v in _values(item)]
    return [node]


def nav_titles(node) -> list[str]:
    """Every title in mkdocs.yml's nav."""
    if isinstance(node, list):
        return [t for item in node for t in nav_titles(item)]
    if isinstance(node, dict):
        return [t for key, value in node.items() for t in [str(key), *nav_titles(value)]]
    return []


def _strings(node) -> list[str]:
    """Every string of parsed YAML, keys included (what the theme may write into a page)."""
    return [value for value in _values(node) if isinstance(value, str)]


def problems(root: Path = REPO_ROOT) -> list[str]:
    """Everything that keeps the site from being built safely, one line each."""
    from mkdocs.utils.meta import get_data  # the metadata MkDocs itself reads from a page

    from website.site_pages import mkdocs_config

    found = link_problems(root)
    mkdocs_yml = root / "mkdocs.yml"
    if mkdocs_yml.exists():
        try:
            config = mkdocs_config(mkdocs_yml)
        except (ValueError, yaml.YAMLError) as e:
            return found + [f"mkdocs.yml: not valid YAML ({' '.join(str(e).split())[:120]})"]
        # the parsed strings, as the theme gets them ("\x3cimg" in YAML is "<img"), and the text as written
        found += script_problems("\n".join([mkdocs_yml.read_text(encoding="utf-8", errors="replace"),
                                            *_strings(config)]), "mkdocs.yml")
        for title in nav_titles(config.get("nav", [])):
            found += title_problems(title, "mkdocs.yml: nav")
        snippets = [e["pymdownx.snippets"] for e in config.get("markdown_extensions", [])
                    if isinstance(e, dict) and "pymdownx.snippets" in e]
        if snippets and (not isinstance(snippets[0], dict) or snippets[0].get("base_path") != list(INCLUDE_BASES)
                         or snippets[0].get("url_download")):
            found.append(f"mkdocs.yml: pymdownx.snippets must have base_path {list(INCLUDE_BASES)} and no "
                         "url_download (this check allows includes from those folders only)")
    docs = root / "docs"
    for path in sorted([*docs.rglob("*"), *(root / "exercises").rglob("*")]):
        if path.is_symlink() or not path.is_file():
            continue
        where = path.relative_to(root).as_posix()
        if _within(path, docs) and path.suffix.lower() not in PUBLISHED_SUFFIXES:
            found.append(f"{where}: the site publishes only {', '.join(sorted(PUBLISHED_SUFFIXES))} files from docs/")
        if path.suffix.lower() not in MARKUP_SUFFIXES | {".py"}:
            continue
        text = read_page(path)
        found += script_problems(text, where)
        if path.suffix.lower() in (".md", ".markdown", ".mdown", ".mkd") and not _within(path, docs / "results"):
            found += include_problems(text, where, root)
            # YAML between --- (or ...) lines, or MultiMarkdown's 'key: value' first lines: the check names a
            # malformed front matter itself, and MkDocs shows one as text, which the scan above read
            found += front_matter_problems(get_data(text)[1], where)
    for demo in sorted((root / "demos").rglob("*.py")):  # prose and code alike: the notebook page shows both
        found += script_problems(demo.read_text(encoding="utf-8", errors="replace"), demo.relative_to(root).as_posix())
    return list(dict.fromkeys(found))  # a file included by a page is also scanned on its own: name it once
