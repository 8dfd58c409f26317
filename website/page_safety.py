"""What the site may publish: files from inside the repository, includes from two folders, no script a contributor
wrote. The check and the site build both ask ``problems()``; each problem is one line naming the file.

- **Includes** (pymdownx.snippets, ``--8<--``): only the one-line form ``--8<-- "path"``, resolved the way
  mkdocs.yml's ``base_path`` resolves it (docs/includes, then exercises/), to a regular file inside that folder
  with no symbolic link on the way, and the included file's own include lines obey the same rule. Snippets
  follows links and, with the repository root as a base, published .git/config and /etc/passwd.
- **Links**: no symbolic link anywhere under docs/, exercises/ or overrides/ (MkDocs copies what a link points
  to, and the pages' includes read through them).
- **Script**: no ``<script>``, event handler attribute (``onerror=``), ``javascript:`` address or embedding tag
  (iframe, object, embed, base, form, meta refresh) in a page, an included file, a demo's prose (its notebook
  page) or mkdocs.yml; and no markup at all in a navigation title or a page's front-matter title, which the
  theme writes into every page unescaped. Code (fenced or inline) is text and may show any of it.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from records.paths import REPO_ROOT
from website.markers import transform_outside_code

INCLUDE_BASES = ("docs/includes", "exercises")  # mkdocs.yml: pymdownx.snippets base_path, in this order
PUBLISHED_TREES = ("docs", "exercises", "overrides")
SNIPPET_LINE = re.compile(r"[ \t]*-+8<-+")  # a line pymdownx.snippets reads as an include (`;--8<--` is escaped text)
ALLOWED_INCLUDE = re.compile(r'\s*--8<-- "([A-Za-z0-9_][A-Za-z0-9_.\-/]*)"\s*')
SCRIPT = re.compile(
    r"<\s*/?\s*(script|iframe|frame|object|embed|base|applet)\b"  # tags that run or load something
    r"|\bon[a-z]{3,}\s*=\s*[\"'\w]"  # an event handler attribute: onerror=, onload=, onclick= (also in {: ... })
    r"|\b(java|vb)script\s*:"  # a script address
    r"|\bhttp-equiv\s*=\s*[\"']?refresh"  # a redirect
    r"|\bsrcdoc\s*=", re.I)
MARKUP = re.compile(r"[<>]|\{\{|\}\}|`")


def _prose(text: str) -> str:
    """The text outside code (fenced blocks, inline code), where Markdown passes raw HTML through."""
    kept: list[str] = []

    def keep(chunk: str) -> str:
        kept.append(chunk)
        return chunk

    transform_outside_code(text, keep)
    return "\n".join(kept)


def script_problems(text: str, where: str, code_is_text: bool = True) -> list[str]:
    """Raw HTML that runs script, in the prose of a Markdown text (or all of a text that is not Markdown)."""
    scanned = _prose(text) if code_is_text else text
    return [f"{where}: raw HTML that could run script ({m.group(0).strip()!r}); write it as text or in `code`"
            for m in list(SCRIPT.finditer(scanned))[:1]]


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
    if not stat.S_ISREG(os.lstat(path).st_mode):
        return "is not a regular file"
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
        why = _regular_inside(candidate, folder)
        if why is not None:
            return None, why
        if not _within(candidate.resolve(), folder.resolve()):
            return None, "leaves its folder"
        return candidate, ""
    return None, reason


def include_problems(text: str, where: str, root: Path = REPO_ROOT, depth: int = 0) -> list[str]:
    """Every include line of ``text`` that is not an allowed one, and the problems of the files it includes."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        if not SNIPPET_LINE.match(line):
            continue
        at = f"{where}:{number}"
        m = ALLOWED_INCLUDE.fullmatch(line)
        if not m:
            problems.append(f"{at}: include line {line.strip()[:80]!r} refused; the site includes only with the one-line "
                            f'form --8<-- "path" (a file in {" or ".join(INCLUDE_BASES)})')
            continue
        target, why = resolve_include(m.group(1), root)
        if target is None:
            problems.append(f"{at}: include {m.group(1)!r} refused: it {why}; the site includes only regular files "
                            f"inside {' or '.join(INCLUDE_BASES)}, never through a symbolic link")
        elif depth < 3:
            inner = target.read_text(encoding="utf-8", errors="replace")
            problems += include_problems(inner, target.relative_to(root).as_posix(), root, depth + 1)
            problems += script_problems(inner, target.relative_to(root).as_posix(), code_is_text=target.suffix == ".md")
    return problems


def link_problems(root: Path = REPO_ROOT) -> list[str]:
    """Every symbolic link in the folders the site publishes or includes from."""
    found = []
    for tree in PUBLISHED_TREES:
        for folder, dirs, files in os.walk(root / tree):  # os.walk never descends into a linked folder
            for name in sorted(dirs + files):
                path = Path(folder) / name
                if path.is_symlink():
                    found.append(f"{path.relative_to(root).as_posix()}: a symbolic link; the site publishes and "
                                 "includes regular files only (replace it with the file itself)")
    return sorted(found)


def title_problems(title, where: str) -> list[str]:
    """A title the theme writes unescaped (navigation, page heading): plain text only."""
    if not isinstance(title, str):
        return [f"{where}: the title must be text, got {type(title).__name__}"]
    if MARKUP.search(title) or any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in title):
        return [f"{where}: title {title[:60]!r} holds markup or control characters (<, >, {{{{, }}}}, `); "
                "titles are plain text"]
    return []


def nav_titles(node) -> list[str]:
    """Every title in mkdocs.yml's nav."""
    if isinstance(node, list):
        return [t for item in node for t in nav_titles(item)]
    if isinstance(node, dict):
        return [t for key, value in node.items() for t in [str(key), *nav_titles(value)]]
    return []


def problems(root: Path = REPO_ROOT) -> list[str]:
    """Everything that keeps the site from being built safely, one line each."""
    from website.site_pages import FRONT_MATTER, FrontMatterError, front_matter, mkdocs_config

    found = link_problems(root)
    mkdocs_yml = root / "mkdocs.yml"
    if mkdocs_yml.exists():
        found += script_problems(mkdocs_yml.read_text(encoding="utf-8"), "mkdocs.yml", code_is_text=False)
        for title in nav_titles(mkdocs_config(mkdocs_yml).get("nav", [])):
            found += title_problems(title, "mkdocs.yml: nav")
    docs = root / "docs"
    for path in sorted(docs.rglob("*")):
        if path.is_symlink() or not path.is_file() or _within(path, docs / "results"):
            continue
        where = path.relative_to(root).as_posix()
        if path.suffix == ".md":
            text = path.read_text(encoding="utf-8", errors="replace")
            found += include_problems(text, where, root) + script_problems(text, where)
            if FRONT_MATTER.match(text):
                try:
                    meta, _ = front_matter(text, where)
                except FrontMatterError:
                    meta = {}  # the check names a malformed front matter itself
                if "title" in meta:
                    found += title_problems(meta["title"], f"{where}: front matter")
        elif path.suffix in (".html", ".htm", ".svg", ".yml", ".yaml"):
            found += script_problems(path.read_text(encoding="utf-8", errors="replace"), where, code_is_text=False)
    for demo in sorted((root / "demos").rglob("*.py")):
        prose = "\n".join(line[2:] for line in demo.read_text(encoding="utf-8").splitlines() if line.startswith("# "))
        found += script_problems(prose, demo.relative_to(root).as_posix())
    return list(dict.fromkeys(found))  # a file included by a page is also scanned on its own: name it once
