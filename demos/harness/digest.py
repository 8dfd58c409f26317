"""The source digest: a hash over the code that produced a record, and the one freshness rule.

It covers the demo file, every file of the harness, and every local module the demo imports,
followed transitively (found by reading import statements, never by importing), including a module a
demo runs in a child process by name (a string literal such as "demos.t4_hardware._cold_start"). A record whose
digest differs from the current one is stale: the code changed since it was measured.

The digest follows code, not prose: whole-line comments (which include every ``# %% [markdown]``
cell and cell marker of a percent-format demo) and blank lines are left out, so rewording a demo's
explanation does not force a re-measurement, while any change to a statement does.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

from demos.harness.paths import REPO_ROOT


_MODULE_NAME = re.compile(r"demos(\.[A-Za-z_][A-Za-z0-9_]*)+\Z")


def _module_file(module: str, root: Path) -> Path | None:
    """The file of a module inside the repository, or None for anything else (torch, stdlib...)."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_inits(module: str, root: Path) -> list[Path]:
    """Importing a.b.c runs a/__init__.py and a/b/__init__.py first."""
    parts = module.split(".")
    inits = []
    for i in range(1, len(parts)):
        init = root.joinpath(*parts[:i], "__init__.py")
        if init.is_file():
            inits.append(init)
    return inits


def _imported_modules(path: Path, root: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against this file's package
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names.add(module)
            # "from pkg import name" may import the submodule pkg.name
            names.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_NAME.match(node.value):
            names.add(node.value)  # a module run in a child process: [sys.executable, "-m", "demos.x._child"]
    return names


def local_sources(demo_file: Path, root: Path = REPO_ROOT) -> list[Path]:
    """The demo, the harness, and every local module reachable through imports, sorted."""
    seen: set[Path] = set()
    todo = [demo_file.resolve(), *sorted(p.resolve() for p in (root / "demos" / "harness").glob("*.py"))]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _imported_modules(path, root):
            found = _module_file(module, root)
            if found is not None:
                todo.append(found.resolve())
                todo.extend(p.resolve() for p in _package_inits(module, root))
    return sorted(seen)


def code_lines(text: str) -> str:
    """The lines that are code: no blank lines, no whole-line comments, trailing space stripped."""
    kept = (line.rstrip() for line in text.splitlines())
    return "\n".join(line for line in kept if line and not line.lstrip().startswith("#"))


def source_digest(demo_file: Path, root: Path = REPO_ROOT) -> str:
    h = hashlib.sha256()
    for path in local_sources(demo_file, root):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(code_lines(path.read_text(encoding="utf-8")).encode())
        h.update(b"\0")
    return "sha256:" + h.hexdigest()


FRESH, STALE, MISSING = "fresh", "stale", "missing"


def freshness(record_digest: str | None, current_digest: str) -> str:
    """The one freshness rule (regen, check and the renderer all ask here): a record is fresh when the
    code that made it is the code on disk now, stale when it differs, missing when there is none."""
    if record_digest is None:
        return MISSING
    return FRESH if record_digest == current_digest else STALE
