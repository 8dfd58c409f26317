"""The result record: one JSON file per demo per device class, docs/results/<demo>/<class>.json.

This module owns the schema. ``validate`` names every problem by field, ``load`` refuses a
malformed file with its path and field, and ``write`` replaces a record only once the new
one is complete and valid, so a crash never leaves half a file or loses the previous record.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from demos.harness import atomic

SCHEMA_VERSION = 1
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
RATE_UNITS = {"GB/s", "TFLOP/s"}  # checked against datasheet peaks


class RecordError(Exception):
    """A record that is not well formed; the message names the file and the field."""


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _expect(errors: list[str], cond: bool, field: str, problem: str) -> bool:
    if not cond:
        errors.append(f"{field}: {problem}")
    return cond


def _check_str(errors, obj: dict, key: str, where: str, required: bool = True) -> None:
    if key not in obj:
        _expect(errors, not required, f"{where}.{key}", "missing")
    else:
        _expect(errors, isinstance(obj[key], str), f"{where}.{key}", f"expected a string, got {obj[key]!r:.60}")


def _check_number(errors, obj: dict, key: str, where: str, required: bool = True) -> None:
    if key not in obj:
        _expect(errors, not required, f"{where}.{key}", "missing")
    else:
        _expect(errors, _is_number(obj[key]), f"{where}.{key}", f"expected a finite number, got {obj[key]!r:.60}")


def _check_metric(errors, name: str, metric, where: str) -> None:
    field = f"{where}.{name}"
    if not _expect(errors, NAME.match(name) is not None, field, "bad name (letters, digits, _ . - only)"):
        return
    if not _expect(errors, isinstance(metric, dict), field, "expected an object"):
        return
    _check_number(errors, metric, "value", field)
    _check_str(errors, metric, "unit", field)
    _check_str(errors, metric, "label", field, required=False)
    _check_str(errors, metric, "ceiling", field, required=False)
    _check_number(errors, metric, "fraction_of_ceiling", field, required=False)


def validate(record) -> list[str]:
    """Every problem with a record, as 'field: problem' strings; empty when it is well formed."""
    errors: list[str] = []
    if not _expect(errors, isinstance(record, dict), "(top level)", "expected a JSON object"):
        return errors
    _expect(errors, record.get("schema") == SCHEMA_VERSION, "schema", f"expected {SCHEMA_VERSION}")
    for key in ("demo", "module", "title", "device_class", "size"):
        _check_str(errors, record, key, "record")
    if isinstance(record.get("demo"), str):
        _expect(errors, NAME.match(record["demo"]) is not None, "demo", "bad demo name")
    _expect(errors, isinstance(record.get("source_digest"), str) and DIGEST.match(record["source_digest"]) is not None,
            "source_digest", "expected 'sha256:' and 64 hex digits")
    _check_number(errors, record, "wall_time_s", "record")

    for section, kind in (("metrics", dict), ("ceilings", dict), ("provenance", dict), ("artifacts", dict),
                          ("tables", list), ("series", list), ("checks", list), ("not_run", list)):
        if not _expect(errors, isinstance(record.get(section), kind), section, f"expected a {kind.__name__}"):
            continue
    if errors:
        return errors

    for name, metric in record["metrics"].items():
        _check_metric(errors, name, metric, "metrics")
        if isinstance(metric, dict) and "ceiling" in metric:
            _expect(errors, metric["ceiling"] in record["ceilings"], f"metrics.{name}.ceiling",
                    f"names no ceiling of this record ({metric['ceiling']!r:.40})")
    for name, ceiling in record["ceilings"].items():
        _check_metric(errors, name, ceiling, "ceilings")
    for key in ("device_name", "device_class", "utc", "python"):
        _check_str(errors, record["provenance"], key, "provenance")
    _expect(errors, isinstance(record["provenance"].get("packages"), dict), "provenance.packages", "expected an object")
    for name, text in record["artifacts"].items():
        _expect(errors, isinstance(text, str), f"artifacts.{name}", "expected a string")

    for i, table in enumerate(record["tables"]):
        where = f"tables[{i}]"
        if not _expect(errors, isinstance(table, dict), where, "expected an object"):
            continue
        _check_str(errors, table, "name", where)
        _check_str(errors, table, "title", where)
        columns, rows = table.get("columns"), table.get("rows")
        if _expect(errors, isinstance(columns, list) and all(isinstance(c, str) for c in columns),
                   f"{where}.columns", "expected a list of strings") and \
                _expect(errors, isinstance(rows, list), f"{where}.rows", "expected a list"):
            for j, row in enumerate(rows):
                ok = isinstance(row, list) and len(row) == len(columns) and all(
                    c is None or isinstance(c, str) or _is_number(c) for c in row)
                _expect(errors, ok, f"{where}.rows[{j}]",
                        f"expected {len(columns)} cells, each a string, a finite number or null")

    for i, series in enumerate(record["series"]):
        where = f"series[{i}]"
        if not _expect(errors, isinstance(series, dict), where, "expected an object"):
            continue
        for key in ("name", "title", "x_label", "y_label"):
            _check_str(errors, series, key, where)
        lines = series.get("lines")
        if not _expect(errors, isinstance(lines, list) and lines, f"{where}.lines", "expected a non-empty list"):
            continue
        for j, line in enumerate(lines):
            lw = f"{where}.lines[{j}]"
            if not _expect(errors, isinstance(line, dict), lw, "expected an object"):
                continue
            _check_str(errors, line, "label", lw)
            xs, ys = line.get("x"), line.get("y")
            ok = isinstance(xs, list) and isinstance(ys, list) and len(xs) == len(ys) and \
                all(_is_number(v) for v in xs) and all(v is None or _is_number(v) for v in ys)
            _expect(errors, ok, lw, "expected x and y lists of equal length holding numbers (y may hold null)")
        for j, hline in enumerate(series.get("hlines", [])):
            hw = f"{where}.hlines[{j}]"
            if _expect(errors, isinstance(hline, dict), hw, "expected an object"):
                _check_str(errors, hline, "label", hw)
                _check_number(errors, hline, "y", hw)

    for i, check in enumerate(record["checks"]):
        where = f"checks[{i}]"
        if not _expect(errors, isinstance(check, dict), where, "expected an object"):
            continue
        _check_str(errors, check, "name", where)
        _expect(errors, isinstance(check.get("passed"), bool), f"{where}.passed", "expected true or false")
        _check_str(errors, check, "detail", where)

    for i, item in enumerate(record["not_run"]):
        where = f"not_run[{i}]"
        if _expect(errors, isinstance(item, dict), where, "expected an object"):
            _check_str(errors, item, "variant", where)
            _check_str(errors, item, "reason", where)
    return errors


def load(path: Path) -> dict:
    """Read and validate a record; a problem raises RecordError naming the file and the field."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except OSError as e:
        raise RecordError(f"{path}: cannot be read ({e.strerror})") from None
    errors = validate(record)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise RecordError(f"{path}: {errors[0]}{more}")
    return record


def write(path: Path, record: dict) -> None:
    """Validate, then write atomically (demos/harness/atomic.py): a crash never loses the previous record."""
    errors = validate(record)
    if errors:
        raise RecordError(f"refusing to write {path}: {errors[0]}")
    atomic.write_json(path, record)


def record_path(results_dir: Path, demo: str, device_class: str) -> Path:
    return Path(results_dir) / demo / f"{device_class}.json"
