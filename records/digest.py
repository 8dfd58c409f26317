"""The source digest, and the one freshness rule.

A record's digest covers exactly what decides its numbers, and nothing else:

1. **the measuring code**: the demo file and every local module it imports (demos/common, its topic's
   helpers, a module it runs in a child process by name, such as "demos.t4_hardware._cold_start"),
   followed transitively through import statements (read, never imported). The harness
   (demos/harness/) and this core (records/) are infrastructure and are left out;
2. **the measurement protocol's version**: ``PROTOCOL_VERSION`` in demos/harness/timing.py. Whoever changes
   how the harness measures (the timing loop, the ceilings, the L2 flush, the thread policy) bumps it on
   purpose, and every record goes stale;
3. **the declared inputs**: what a demo reads besides its code, declared with
   ``INPUTS = declare(...)`` (records/inputs.py) in the demo or one of its local modules: other demos'
   records, data files and datasheet entries, each hashed by what it holds now.

Only code counts: blank lines, whole-line comments (every markdown cell of a percent-format demo) and the
lines that import the harness or the core are left out. Rewording a demo's prose, editing a harness
docstring, or renaming or moving a harness module stales nothing; a changed statement in the demo or its
helpers, a changed input or a bumped protocol stales the record.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from records.paths import REPO_ROOT

# Infrastructure: neither its files nor the lines importing it are part of a demo's measuring code.
INFRA_PACKAGES = (("records",), ("demos", "harness"))  # as name parts: a dotted string would read as an import
PROTOCOL_FILE = Path("demos", "harness", "timing.py")  # holds PROTOCOL_VERSION = <int>
DIGEST_FIELDS = ("source_digest", "source_files", "inputs")  # what a record says about its own digest

_MODULE_NAME = re.compile(r"demos(\.[A-Za-z_][A-Za-z0-9_]*)+\Z")


def is_infra(module: str) -> bool:
    parts = tuple(module.split("."))
    return any(parts[:len(p)] == p for p in INFRA_PACKAGES)


# -- reading source files (never importing them) -----------------------------------------------------

def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _package(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts[:-1])


def imported_modules(tree: ast.Module, package: str = "") -> set[str]:
    """Every module name a file imports, anywhere in it (the one import walker: the digest follows the local
    ones, the GPU campaign reads the third-party ones), plus module names written as strings
    ("demos.x._child", a module run in a child process). ``package`` resolves relative imports."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against this file's package
                parts = package.split(".")
                base = parts[: len(parts) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names.add(module)
            # "from pkg import name" may import the submodule pkg.name
            names.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_NAME.match(node.value):
            names.add(node.value)
    return names


def third_party_packages(path: Path) -> set[str]:
    """Top-level packages a file imports: not the standard library, not this repository."""
    import sys

    try:
        tree = _parse(path)
    except (OSError, SyntaxError, UnicodeDecodeError):
        return set()
    local = {"demos", "records", "scripts", "website", "exercises", "__future__"}
    tops = {name.split(".")[0] for name in imported_modules(tree) if name}
    return {t for t in tops if t not in sys.stdlib_module_names and t not in local}


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
    return [init for i in range(1, len(parts)) if (init := root.joinpath(*parts[:i], "__init__.py")).is_file()]


def local_sources(demo_file: Path, root: Path = REPO_ROOT) -> list[Path]:
    """The demo and every local module reachable through its imports, infrastructure left out, sorted."""
    seen: set[Path] = set()
    demo_file = Path(demo_file).resolve()
    own_module = ".".join(demo_file.relative_to(root.resolve()).with_suffix("").parts)
    todo = [demo_file, *(p.resolve() for p in _package_inits(own_module, root))]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in imported_modules(_parse(path), _package(path, root)):
            if is_infra(module):
                continue
            found = _module_file(module, root)
            if found is not None:
                todo.append(found.resolve())
                todo.extend(p.resolve() for p in _package_inits(module, root))
    return sorted(seen)


def code_lines(text: str) -> str:
    """The lines that are measuring code: no blank lines, no whole-line comments, no imports of the harness
    or the core; trailing space stripped."""
    skip: set[int] = set()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = None
    for node in ast.walk(tree) if tree else ():
        infra = (isinstance(node, ast.ImportFrom) and not node.level and is_infra(node.module or "")) or \
                (isinstance(node, ast.Import) and all(is_infra(a.name) for a in node.names))
        if infra:
            skip.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    kept = (line.rstrip() for i, line in enumerate(text.splitlines(), 1) if i not in skip)
    return "\n".join(line for line in kept if line and not line.lstrip().startswith("#"))


def declared_inputs(path: Path) -> dict[str, list[str]]:
    """The literal arguments of ``INPUTS = declare(...)`` in a file ({} when it has none).

    Read from the source, so freshness never imports a demo; anything but literals is refused."""
    tree = _parse(path)
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        func = node.value.func
        if getattr(func, "id", None) != "declare" and getattr(func, "attr", None) != "declare":
            continue
        if [getattr(t, "id", None) for t in node.targets] != ["INPUTS"] or node.value.args:
            raise ValueError(f"{path}:{node.lineno}: write inputs as INPUTS = declare(records=[...], files=[...], "
                             "datasheets=[...]) with keyword arguments only")
        for kw in node.value.keywords:
            try:
                value = ast.literal_eval(kw.value)
            except ValueError:
                raise ValueError(f"{path}:{node.lineno}: INPUTS' {kw.arg}= must be a literal list of strings "
                                 "(freshness reads it without running the demo)") from None
            if not (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
                raise ValueError(f"{path}:{node.lineno}: INPUTS' {kw.arg}= must be a list of strings")
            found.setdefault(kw.arg, []).extend(value)
    return found


def protocol_version(root: Path = REPO_ROOT) -> int:
    """PROTOCOL_VERSION of the harness's timing module, read from its source."""
    for node in _parse(root / PROTOCOL_FILE).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["PROTOCOL_VERSION"]:
            return int(ast.literal_eval(node.value))
    raise ValueError(f"{PROTOCOL_FILE}: no PROTOCOL_VERSION = <int>")


# -- inputs: what each declared name holds now -----------------------------------------------------

def content_hash(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def measured_content(rec: dict) -> bytes:
    """A record's measurements without what it says about its own digest: migrating an input's digest
    (a refactor that measured nothing again) does not stale the records that read it."""
    body = {k: v for k, v in rec.items() if k not in DIGEST_FIELDS}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _record_hash(path: Path) -> str:
    from records.record import read_bounded  # a link to /dev/zero or a FIFO is never read (records/record.py)

    try:
        raw = read_bounded(path)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"
    try:
        return content_hash(measured_content(json.loads(raw)))
    except (ValueError, AttributeError, RecursionError):
        return "malformed " + content_hash(raw)


def _datasheet_hash(names: list[str], sheets: dict) -> dict[str, str]:
    return {name: content_hash(json.dumps(sheets.get(name), sort_keys=True).encode()) for name in names}


def input_hashes(declared: dict[str, list[str]], demo: str, device_class: str, root: Path = REPO_ROOT) -> dict[str, str]:
    """{'record kernel_fusion/cpu': hash, 'file tests/fixtures/x.json': hash, 'datasheet h100': hash, ...}
    for the declared inputs, ``{device}`` read as this record's device class and ``*`` expanded."""
    from records import datasheets
    from records.paths import RESULTS_DIR, input_record_demos, input_record_path

    results = root / RESULTS_DIR.relative_to(REPO_ROOT)
    out: dict[str, str] = {}
    for pattern in declared.get("records", []):
        name, _, cls = pattern.replace("{device}", device_class).partition("/")
        demos = [d for d in input_record_demos(cls, results) if d != demo] if name == "*" else [name]
        for d in demos:  # the file the demo reads (a campaign's staged copy first): records/paths.py
            out[f"record {d}/{cls}"] = _record_hash(input_record_path(d, cls, results))
    for rel in declared.get("files", []):
        path = root / rel
        out[f"file {rel}"] = content_hash(path.read_bytes()) if path.is_file() else "missing"
    if declared.get("datasheets"):
        sheets = datasheets.load(root)
        names = [n.replace("{device}", device_class) for n in declared["datasheets"]]
        names = sorted(sheets) if "*" in names else sorted(set(names))
        out.update({f"datasheet {k}": v for k, v in _datasheet_hash(names, sheets).items()})
    return dict(sorted(out.items()))


# -- the digest ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Digest:
    value: str  # "sha256:...": what a record stores as source_digest
    files: list[str]  # the measuring code's files, relative to the repository
    inputs: dict[str, str] = field(default_factory=dict)  # declared input -> its hash
    protocol: int = 0


def code_hash(files: list[Path], root: Path = REPO_ROOT) -> str:
    h = hashlib.sha256()
    for path in files:
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(code_lines(path.read_text(encoding="utf-8")).encode() + b"\0")
    return h.hexdigest()


def combine(code: str, protocol: int, inputs: dict[str, str]) -> str:
    h = hashlib.sha256()
    h.update(f"protocol {protocol}\0code {code}\0".encode())
    for name, value in inputs.items():
        h.update(f"{name}={value}\0".encode())
    return "sha256:" + h.hexdigest()


def declared_by(files: list[Path]) -> dict[str, list[str]]:
    """The union of the INPUTS declarations of a demo's files."""
    merged: dict[str, list[str]] = {}
    for path in files:
        for kind, names in declared_inputs(path).items():
            merged.setdefault(kind, []).extend(n for n in names if n not in merged.get(kind, []))
    return merged


def assemble(code: str, files: list[Path], declared: dict, demo: str, device_class: str, files_root: Path,
             repo: Path = REPO_ROOT) -> Digest:
    """The digest from its parts: the code's hash, and the inputs and protocol as the repository holds them now."""
    inputs = input_hashes(declared, demo, device_class, repo)
    protocol = protocol_version(repo)
    return Digest(combine(code, protocol, inputs), [p.relative_to(files_root).as_posix() for p in files], inputs,
                  protocol)


def source_digest(demo_file: Path, device_class: str, root: Path = REPO_ROOT) -> Digest:
    """The digest of a demo's record on one device class (its inputs may depend on the class)."""
    files = local_sources(demo_file, root)
    return assemble(code_hash(files, root), files, declared_by(files), Path(demo_file).stem, device_class, root, root)


FRESH, STALE, MISSING = "fresh", "stale", "missing"


def freshness(record_digest: str | None, current_digest: str) -> str:
    """The one freshness rule (regen, check, the renderer and the campaign all ask here): a record is fresh
    when what made it (code, protocol, inputs) is what is on disk now, stale when it differs, missing when
    there is none."""
    if record_digest is None:
        return MISSING
    return FRESH if record_digest == current_digest else STALE

