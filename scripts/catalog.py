"""What exists: the demos under demos/, their records under docs/results/, the datasheets.

Imports nothing heavy (no torch), so the check command and the site build stay fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from demos.harness import record
from demos.common.datasheets import load as load_datasheets
from demos.harness.paths import DEMOS_DIR, REPO_ROOT, RESULTS_DIR
from demos.harness import digest as digests
from demos.harness.digest import local_sources, source_digest



NOT_TOPICS = {"harness", "common"}  # demos/harness: the harness; demos/common: helpers that several topics share


@dataclass(frozen=True)
class Demo:
    name: str  # the file's stem, unique across demos/: "kernel_fusion"
    path: Path  # demos/t3_compiler/kernel_fusion.py
    module: str  # demos.t3_compiler.kernel_fusion

    def digest(self) -> str:
        return _cached_digest(self.path)


def _stamp(paths) -> tuple:
    """What a cached answer about files depends on: each file's name, modification time and size."""
    stamp = []
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            return ()
        stamp.append((str(p), st.st_mtime_ns, st.st_size))
    return tuple(stamp)


_DIGESTS: dict[Path, tuple[tuple, str]] = {}
_RECORDS: dict[Path, tuple[tuple, record.Record]] = {}


def _cached_digest(path: Path) -> str:
    """source_digest, computed again only when one of the files it covered changed (a site build asks for
    each demo's digest many times; `mkdocs serve` must still see an edit at once). A new import changes
    the importing file, so the list of covered files stays right."""
    cached = _DIGESTS.get(path)
    if cached is not None:
        stamp, value = cached
        if stamp and stamp == _stamp([Path(p) for p, _, _ in stamp]) and _stamp([path])[0] in stamp:
            return value
    sources = local_sources(path)
    value = source_digest(path)
    _DIGESTS[path] = (_stamp(sources), value)
    return value


def demo_sources(path: Path) -> list[Path]:
    """The files a demo's digest covers (the demo, the harness and the local modules it imports), from the
    digest's cache: a site build that asks for them per demo (the GPU budget table) parses nothing twice."""
    _cached_digest(path)
    stamp = _DIGESTS[path][0]
    return [Path(p) for p, _, _ in stamp] if stamp else local_sources(path)


def _cached_record(path: Path) -> record.Record:
    """record.load, validated again only when the file changed."""
    stamp = _stamp([path])
    cached = _RECORDS.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    rec = record.load(path)
    _RECORDS[path] = (stamp, rec)
    return rec


def freshness(demo: Demo, rec: dict | None) -> str:
    """fresh | stale | missing: the harness's one freshness rule, applied to a demo and its record."""
    return digests.freshness(None if rec is None else rec["source_digest"], demo.digest())


def record_freshness(demo: Demo, device_class: str, results_dir: Path = RESULTS_DIR) -> str:
    """Freshness of the record on disk; a malformed record counts as missing (it must be re-made)."""
    path = record.record_path(results_dir, demo.name, device_class)
    if not path.exists():
        return digests.MISSING
    try:
        return freshness(demo, record.load(path))
    except record.RecordError:
        return digests.MISSING


def discover(demos_dir: Path = DEMOS_DIR) -> dict[str, Demo]:
    """Every demos/<topic>/<demo>.py (not the harness, not demos/common, not _private.py), keyed by name."""
    found: dict[str, Demo] = {}
    for path in sorted(demos_dir.glob("*/*.py")):
        if path.parent.name in NOT_TOPICS or path.name.startswith("_"):
            continue
        name = path.stem
        if name in found:
            raise ValueError(f"two demos are named {name!r}: {found[name].path} and {path}; demo names must be unique")
        module = ".".join(path.relative_to(demos_dir.parent).with_suffix("").parts)
        found[name] = Demo(name=name, path=path, module=module)
    return found


@cache
def datasheets() -> dict[str, dict]:
    return load_datasheets()


def device_label(device_class: str) -> str:
    return datasheets().get(device_class, {}).get("label", device_class)


def datasheet_peak(device_class: str, metric: record.Metric) -> float | None:
    """The published peak that bounds a rate metric on this device class, in the metric's normalised unit
    (GB/s or TFLOP/s): for bytes the host-device link's one-way rate (kind "host_link") or else the memory
    bandwidth (device memory, or a link between devices, which no single GPU's HBM outruns); the dense tensor-core or
    vector peak of the metric's dtype for FLOPs. None for a non-rate, a cache-resident rate, or a peak the
    datasheet does not give (the check reports those)."""
    sheet = datasheets().get(device_class)
    rate = metric.rate
    if sheet is None or rate is None:
        return None
    kind, _ = rate
    if kind == "bytes":
        if metric.cache_resident or metric.kind == "cache":
            return None
        return sheet.get("host_link_gbps") if metric.kind == "host_link" else sheet.get("memory_gbps")
    return sheet.get("tflops", {}).get(metric.dtype) if metric.dtype else None


def is_gpu_class(device_class: str) -> bool:
    return device_class != "cpu"


def record_files(results_dir: Path = RESULTS_DIR) -> list[Path]:
    return sorted(results_dir.glob("*/*.json"))


def load_records(demo: str, results_dir: Path = RESULTS_DIR) -> dict[str, record.Record]:
    """All records of one demo, keyed by device class: GPUs first (by label), CPU last.

    A malformed record raises record.RecordError naming its file and field."""
    records = {p.stem: _cached_record(p) for p in sorted((results_dir / demo).glob("*.json"))}
    order = sorted(records, key=lambda c: (not is_gpu_class(c), device_label(c)))
    return {c: records[c] for c in order}
