"""What exists: the demos under demos/, their records under docs/results/, and whether each record is fresh.

Imports nothing heavy (no torch), so the check command and the site build stay fast. Digests and records
are cached by the files they were computed from, so a site build or `mkdocs serve` asks as often as it
likes and still sees an edit at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from records import datasheets, devices, digest as digests, record
from records.paths import DEMOS_DIR, REPO_ROOT, RESULTS_DIR

NOT_TOPICS = {"harness", "common"}  # demos/harness: the harness; demos/common: helpers that several topics share


@dataclass(frozen=True)
class Demo:
    name: str  # the file's stem, unique across demos/: "kernel_fusion"
    path: Path  # demos/t3_compiler/kernel_fusion.py
    module: str  # demos.t3_compiler.kernel_fusion

    @property
    def root(self) -> Path:
        """The folder its module path starts from: the repository (tests' stand-in demos live elsewhere)."""
        return self.path.parents[self.module.count(".")]

    def digest(self, device_class: str) -> str:
        """The source digest its record on this device class must carry to be fresh."""
        return current_digest(self, device_class).value

    def sources(self) -> list[Path]:
        """The measuring code's files: the demo and the local modules it imports (no infrastructure)."""
        return _code(self.path, self.root)[1]

    def reads(self) -> dict[str, list[str]]:
        """Its declared inputs (records/inputs.py): {'records': [...], 'files': [...], 'datasheets': [...]}."""
        return _code(self.path, self.root)[2]


# -- caches keyed by the files an answer came from ---------------------------------------------------

def _stamp(paths) -> tuple:
    """What a cached answer about files depends on: each file's name, modification time and size."""
    stamp = []
    for p in paths:
        try:
            st = Path(p).stat()
        except OSError:
            stamp.append((str(p), None, None))
            continue
        stamp.append((str(p), st.st_mtime_ns, st.st_size))
    return tuple(stamp)


_CODE: dict[Path, tuple[tuple, list[Path], dict, str]] = {}
_RECORDS: dict[Path, tuple[tuple, record.Record]] = {}


def _code(path: Path, root: Path = REPO_ROOT) -> tuple[str, list[Path], dict]:
    """(code hash, files, declared inputs) of a demo, parsed again only when one of its files changed (a new
    import changes the importing file, so the list of files stays right)."""
    path = Path(path).resolve()
    cached = _CODE.get(path)
    if cached is not None and cached[0] == _stamp(cached[1]):
        return cached[3], cached[1], cached[2]
    files = digests.local_sources(path, root)
    entry = (_stamp(files), files, digests.declared_by(files), digests.code_hash(files, root))
    _CODE[path] = entry
    return entry[3], entry[1], entry[2]


def current_digest(demo: Demo, device_class: str) -> digests.Digest:
    """The digest its record must carry now, from the cached code hash (records/digest.py assembles it)."""
    code, files, declared = _code(demo.path, demo.root)
    return digests.assemble(code, files, declared, demo.name, device_class, demo.root)


def _cached_record(path: Path) -> record.Record:
    """record.load, validated again only when the file changed."""
    stamp = _stamp([path])
    cached = _RECORDS.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    rec = record.load(path)
    _RECORDS[path] = (stamp, rec)
    return rec


# -- freshness ------------------------------------------------------------------------------------------

def freshness(demo: Demo, rec: dict | None) -> str:
    """fresh | stale | missing: the one freshness rule (records/digest.py), for a demo and its record."""
    if rec is None:
        return digests.MISSING
    return digests.freshness(rec["source_digest"], demo.digest(rec["device_class"]))


def why_stale(demo: Demo, rec: dict) -> str:
    """What changed since the record was measured, in words: its code, an input (named), or the protocol."""
    now = current_digest(demo, rec["device_class"])
    then = rec.get("inputs")
    if then is not None and set(then) != set(now.inputs):
        added, dropped = sorted(set(now.inputs) - set(then)), sorted(set(then) - set(now.inputs))
        return "what it reads changed (" + "; ".join(
            part for part in (f"now also {_few(added)}" if added else "", f"no longer {_few(dropped)}" if dropped else "")
            if part) + ")"
    if then is not None and then != now.inputs:
        return f"its input(s) {_few(sorted(k for k in then if then[k] != now.inputs[k]))} changed"
    protocol = (rec.get("settings") or {}).get("protocol_version")
    if protocol is not None and protocol != now.protocol:
        return f"the harness's measurement protocol moved from version {protocol} to {now.protocol}"
    return f"{demo.path.relative_to(demo.root).as_posix()} or a module it imports changed"


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def record_freshness(demo: Demo, device_class: str, results_dir: Path = RESULTS_DIR) -> str:
    """Freshness of the record on disk; a malformed record counts as missing (it must be re-made)."""
    path = record.record_path(results_dir, demo.name, device_class)
    if not path.exists():
        return digests.MISSING
    try:
        return freshness(demo, record.load(path))
    except record.RecordError:
        return digests.MISSING


# -- discovery ------------------------------------------------------------------------------------------

def _topic_order(path: Path) -> tuple:
    """t1, t2, ..., t10, t11: topics by number (not as text, where t10 sorts before t2), then by name."""
    m = re.match(r"t(\d+)_", path.parent.name)
    return (int(m.group(1)) if m else 10**6, path.parent.name, path.name)


def discover(demos_dir: Path = DEMOS_DIR) -> dict[str, Demo]:
    """Every demos/<topic>/<demo>.py (not the harness, not demos/common, not _private.py), keyed by name, in
    topic order."""
    found: dict[str, Demo] = {}
    for path in sorted(demos_dir.glob("*/*.py"), key=_topic_order):
        if path.parent.name in NOT_TOPICS or path.name.startswith("_"):
            continue
        name = path.stem
        if name in found:
            raise ValueError(f"two demos are named {name!r}: {found[name].path} and {path}; demo names must be unique")
        module = ".".join(path.relative_to(demos_dir.parent).with_suffix("").parts)
        found[name] = Demo(name=name, path=path, module=module)
    return found


def readers_last(demos: list[Demo]) -> list[Demo]:
    """The demos in an order where each comes after every demo whose records it reads (declared inputs), and
    a demo that reads every record ('*/...', the record gate) comes last: in one regeneration, a reader sees
    this generation's records. Otherwise topic order is kept. A cycle is an error."""
    names = {d.name for d in demos}

    def reads(d: Demo) -> set[str]:
        wanted = {p.partition("/")[0] for p in d.reads().get("records", [])}
        return (names - {d.name}) if "*" in wanted else (wanted & names)

    ordered: list[Demo] = []
    placed: set[str] = set()
    pending = sorted(demos, key=lambda d: "*" in {p.partition("/")[0] for p in d.reads().get("records", [])})
    while pending:
        ready = next((d for d in pending if reads(d) <= placed), None)
        if ready is None:
            raise ValueError("demos read each other's records in a circle: " + ", ".join(d.name for d in pending))
        ordered.append(ready)
        placed.add(ready.name)
        pending.remove(ready)
    return ordered


def readers_of(demos: list[Demo], changed: set[str]) -> set[str]:
    """The demos that read a record of a demo in ``changed``, directly or through another reader."""
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for d in demos:
            wanted = {p.partition("/")[0] for p in d.reads().get("records", [])}
            hit = (changed | found) - {d.name}
            if d.name not in found and d.name not in changed and ("*" in wanted and hit or wanted & hit):
                found.add(d.name)
                grew = True
    return found


# -- records and datasheets -------------------------------------------------------------------------------

def device_label(device_class: str) -> str:
    return datasheets.label(device_class)


def record_files(results_dir: Path = RESULTS_DIR) -> list[Path]:
    return sorted(results_dir.glob("*/*.json"))


def load_records(demo: str, results_dir: Path = RESULTS_DIR) -> dict[str, record.Record]:
    """All records of one demo, keyed by device class: GPUs first (by label), CPU last.

    A malformed record raises record.RecordError naming its file and field."""
    records = {p.stem: _cached_record(p) for p in sorted((results_dir / demo).glob("*.json"))}
    order = sorted(records, key=lambda c: (not devices.is_gpu_class(c), device_label(c)))
    return {c: records[c] for c in order}
