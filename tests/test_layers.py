"""The house's layers, read from the code's own imports (never by importing it).

    records/   the record core: schema, digest, freshness, catalog, datasheets, device classes, the gate
    demos/     the harness and the demos: measure, write records through the core
    website/   the site: reads records through the core
    scripts/   operations and the check: regen, the GPU campaign, unpack, margins, scaffold

The core imports none of the others (and not torch); no demo imports the site or the operations; the site
never imports the operations; and no module imports another in a circle.
"""

from __future__ import annotations

import subprocess
import sys

from records.digest import imported_modules
from records.paths import REPO_ROOT

import ast

PACKAGES = ("records", "demos", "website", "scripts", "exercises")


def modules() -> dict[str, set[str]]:
    """Every local module and the local modules it imports (anywhere in the file, lazily or not)."""
    files = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            files[name] = path
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = imported_modules(ast.parse(path.read_text(encoding="utf-8")), package)
        graph[name] = {m for m in found if m in files and m != name}
    return graph


def layer(module: str) -> str:
    return module.split(".")[0]


def test_the_core_imports_no_other_layer():
    wrong = {m: sorted(d for d in deps if layer(d) != "records") for m, deps in modules().items()
             if layer(m) == "records" and any(layer(d) != "records" for d in deps)}
    assert not wrong, wrong


def test_no_demo_imports_the_site_or_the_operations():
    wrong = {m: sorted(d for d in deps if layer(d) in ("website", "scripts")) for m, deps in modules().items()
             if layer(m) == "demos" and any(layer(d) in ("website", "scripts") for d in deps)}
    assert not wrong, wrong


def test_the_site_never_imports_the_operations():
    wrong = {m: sorted(d for d in deps if layer(d) == "scripts") for m, deps in modules().items()
             if layer(m) == "website" and any(layer(d) == "scripts" for d in deps)}
    assert not wrong, wrong


def test_demos_read_records_and_datasheets_only_through_declared_inputs():
    """records.inputs is how a demo reads another record, a data file or a datasheet: the digest sees it."""
    readers = ("records.record", "records.catalog", "records.datasheets")
    wrong = {m: sorted(d for d in deps if d in readers) for m, deps in modules().items()
             if m.startswith("demos.") and not m.startswith("demos.harness") and any(d in readers for d in deps)}
    assert not wrong, wrong


def test_no_module_imports_in_a_circle():
    graph = modules()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    # a package's __init__ is imported by its own modules' names ("from demos.harness import run" reads as
    # demos.harness and demos.harness.run): only a circle between two different files counts
    cycles = [c for c in cycles if len(set(c)) > 1 and not all(x == c[0] or x.startswith(c[0] + ".") for x in c)]
    assert not cycles, cycles


def test_the_core_and_the_check_run_without_torch():
    code = ("import sys; import records.catalog, records.plausibility, records.inputs, records.devices, "
            "records.digest, scripts.check; assert 'torch' not in sys.modules, 'torch was imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
