"""The result record: one JSON file per demo per device class, docs/results/<demo>/<class>.json.

The record's shape lives in one place, the JSON Schema beside this file (record.schema.json),
which contributors can read. This module adds the rules a schema cannot say (cross-field
checks) and gives readers typed access:

- ``validate(data)``: every problem, as 'field: problem' strings (schema first, then cross-field);
- ``load(path)``: a validated ``Record``, or RecordError naming the file and the field;
- ``write(path, data)``: validate, then write atomically (the writer is the harness's ``Run.save``).

A ``Record`` is the parsed JSON (a dict) with typed accessors for the parts scripts read:
``rec.metrics["name"].value``, ``rec.ceilings``, ``rec.checks``, ``rec.provenance.commit``, ...
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cache
from pathlib import Path

from records import atomic, units
from records.paths import RECORD_SCHEMA, shown
from records.units import BYTE_RATES, FLOP_RATES

SCHEMA_VERSION = 1
# What a record may be: a regular file of at most MAX_BYTES (the largest committed one is under 100 kB), numbers
# within +-MAX_MAGNITUDE (the plots' log axes cannot draw 1e308; the largest committed number is about 1e9), and a
# measurement date between the project's start and tomorrow.
MAX_BYTES = 8 * 2**20
MAX_MAGNITUDE = 1e100
EARLIEST = datetime(2024, 1, 1, tzinfo=timezone.utc)


class RecordError(Exception):
    """A record that is not well formed; the message names the file and the field."""


@cache
def _validator():
    from jsonschema import Draft202012Validator

    schema = json.loads(RECORD_SCHEMA.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")


def _field(path) -> str:
    """metrics.chain.eager.gbps.value, tables[0].rows[2]: how a problem names its field."""
    text = ""
    for p in path:
        if isinstance(p, int):
            text += f"[{p}]"
        elif _PLAIN_KEY.match(str(p)):
            text += ("." if text else "") + str(p)
        else:  # a key with spaces, quotes or control characters is quoted, so the problem stays one line
            text += f"[{json.dumps(str(p))}]"
    return text or "(top level)"


def _schema_problem(e) -> str:
    """A jsonschema error as 'field: problem', the field named down to the missing or mistyped key."""
    path = list(e.absolute_path)
    if e.validator == "required":
        missing = [k for k in e.validator_value if isinstance(e.instance, dict) and k not in e.instance]
        return f"{_field([*path, *missing[:1]])}: missing"
    if e.validator == "type":
        return f"{_field(path)}: expected {e.validator_value if isinstance(e.validator_value, str) else ' or '.join(e.validator_value)}, got {_short(repr(e.instance), 40)}"
    if e.validator in ("maxItems", "minItems", "maxLength", "minLength"):  # the message would start with the value
        bound = "at most" if e.validator.startswith("max") else "at least"
        what = "characters" if e.validator.endswith("Length") else "items"
        return f"{_field(path)}: {len(e.instance):,} {what}; {bound} {e.validator_value:,}"
    if e.validator == "additionalProperties":
        return f"{_field(path)}: {_short(e.message)} (see records/record.schema.json)"
    return f"{_field(path)}: {_short(e.message)}"


def _short(message: str, limit: int = 140) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _unusable_numbers(value, path=()):
    """(path, why) of NaN, infinite or out-of-range numbers (json.loads accepts NaN, Infinity and 10**400)."""
    if isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        yield path, "not a finite number"
    elif isinstance(value, (int, float)) and abs(value) > MAX_MAGNITUDE:
        yield path, f"out of range (beyond +-{MAX_MAGNITUDE:g}; no measurement is that large)"
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _unusable_numbers(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _unusable_numbers(v, (*path, i))


def _cross_field(data: dict) -> list[str]:
    errors = []
    ceilings = data["ceilings"]
    for name, m in data["metrics"].items():
        where = _field(["metrics", name])
        unit = m["unit"]
        why = units.problem(unit)
        if why:
            errors.append(f"{where}.unit: {why}")
        if (unit in BYTE_RATES or unit in FLOP_RATES) and m["value"] < 0:
            errors.append(f"{where}.value: a rate cannot be negative ({m['value']})")
        if "ceiling" in m:
            c = ceilings.get(m["ceiling"])
            if c is None:
                errors.append(f"{where}.ceiling: names no ceiling of this record ({m['ceiling']!r})")
                continue
            if c["unit"] != unit:
                errors.append(f"{where}.ceiling: metric in {unit} but ceiling {m['ceiling']} in {c['unit']}")
            if "fraction_of_ceiling" not in m:
                errors.append(f"{where}.fraction_of_ceiling: missing (the metric names a ceiling)")
            elif not math.isclose(m["fraction_of_ceiling"], m["value"] / c["value"], rel_tol=1e-6):
                errors.append(f"{where}.fraction_of_ceiling: says {m['fraction_of_ceiling']:.4g} but value / ceiling "
                              f"is {m['value'] / c['value']:.4g}")
        elif "fraction_of_ceiling" in m:
            errors.append(f"{where}.fraction_of_ceiling: given without the ceiling it is a fraction of")
        if unit in FLOP_RATES and "dtype" not in m and ceilings.get(m.get("ceiling"), {}).get("dtype") is None:
            errors.append(f"{where}.dtype: a FLOP rate must say its precision (dtype=...) or name a matmul ceiling")
    for i, table in enumerate(data["tables"]):
        for j, row in enumerate(table["rows"]):
            if len(row) != len(table["columns"]):
                errors.append(f"tables[{i}].rows[{j}]: {len(row)} cells for {len(table['columns'])} columns")
    for i, series in enumerate(data["series"]):
        for j, line in enumerate(series["lines"]):
            if len(line["x"]) != len(line["y"]):
                errors.append(f"series[{i}].lines[{j}]: x has {len(line['x'])} values, y has {len(line['y'])}")
            if "spread" in line and len(line["spread"]) != len(line["x"]):
                errors.append(f"series[{i}].lines[{j}]: x has {len(line['x'])} values, spread has {len(line['spread'])}")
    # A name that matches its schema pattern but for a trailing newline (a JSON Schema "$" allows one): no name,
    # identifier or commit carries a control character.
    names = [("demo", data["demo"]), ("device_class", data["device_class"]), ("size", data["size"]),
             ("source_digest", data["source_digest"]), ("provenance.commit", data["provenance"].get("commit") or ""),
             *((f"{section} key", key) for section in ("metrics", "ceilings", "artifacts") for key in data[section]),
             *((f"{kind}[{i}].name", item["name"]) for kind in ("tables", "series") for i, item in enumerate(data[kind]))]
    for where, name in names:
        if any(ord(c) < 32 or ord(c) == 127 for c in name):
            errors.append(f"{where}: {json.dumps(name)[:60]} holds a control character (a trailing newline?)")
    provenance = data["provenance"]
    if provenance["device_class"] != data["device_class"]:
        errors.append(f"provenance.device_class: {provenance['device_class']!r} differs from device_class "
                      f"{data['device_class']!r}")
    if (provenance["device_kind"] == "cpu") != (data["device_class"] == "cpu"):
        errors.append(f"provenance.device_kind: {provenance['device_kind']!r} for device class "
                      f"{data['device_class']!r} (a cpu record is measured on the cpu, a GPU class's on cuda)")
    try:
        utc = datetime.strptime(provenance["utc"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        errors.append(f"provenance.utc: {provenance['utc']!r} is not a date and time")
    else:
        if not EARLIEST <= utc <= datetime.now(timezone.utc) + timedelta(days=1):
            errors.append(f"provenance.utc: {provenance['utc']} is before the project or in the future")
    if provenance.get("commit") is not None and set(provenance["commit"]) == {"0"}:
        errors.append("provenance.commit: all zeros is no commit")
    return errors


def validate(data) -> list[str]:
    """Every problem with a record, as 'field: problem' strings; empty when it is well formed."""
    errors = [_schema_problem(e)
              for e in sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))]
    if errors:
        return errors
    unusable = [f"{_field(path)}: {why}" for path, why in _unusable_numbers(data)]
    return unusable or _cross_field(data)


# What a metric's value is (the schema's "origin"; absent means measured): only a measured value carries a device.
ORIGINS = ("measured", "computed", "datasheet", "static")


@dataclass(frozen=True)
class Metric:
    """A measured value (or a ceiling) with its unit and, for rates, what bounds it."""

    name: str
    value: float
    unit: str
    label: str = ""
    ceiling: str | None = None
    fraction_of_ceiling: float | None = None
    dtype: str | None = None
    kind: str | None = None
    cache_resident: bool = False
    how: str = ""
    signed: bool = False  # a fitted slope or a difference, which may fall below zero in a unit of magnitudes
    origin: str = "measured"  # measured (in this run, on this device) | computed | datasheet | static

    @property
    def measured(self) -> bool:
        """Measured in this run on the record's device (the only kind of value that carries a device label)."""
        return self.origin == "measured"

    @classmethod
    def of(cls, name: str, d: dict) -> "Metric":
        return cls(name=name, value=float(d["value"]), unit=d["unit"], label=d.get("label", ""),
                   ceiling=d.get("ceiling"), fraction_of_ceiling=d.get("fraction_of_ceiling"), dtype=d.get("dtype"),
                   kind=d.get("kind"), cache_resident=bool(d.get("cache_resident", False)), how=d.get("how", ""),
                   signed=bool(d.get("signed", False)), origin=d.get("origin", "measured"))

    @property
    def rate(self) -> tuple[str, float] | None:
        """('bytes', GB/s) or ('flops', TFLOP/s) for a rate, else None."""
        if self.unit in BYTE_RATES:
            return "bytes", self.value * BYTE_RATES[self.unit]
        if self.unit in FLOP_RATES:
            return "flops", self.value * FLOP_RATES[self.unit]
        return None


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str
    expected_failure: bool = False


@dataclass(frozen=True)
class Provenance:
    device_name: str
    device_class: str
    device_kind: str
    utc: str
    python: str
    packages: dict
    commit: str | None
    dirty: bool | None
    cuda: str | None
    driver: str | None
    cpu_count: int | None
    torch_threads: int | None


class Record(dict):
    """A validated record: the JSON as a dict, plus typed accessors (use these in scripts)."""

    @property
    def demo(self) -> str:
        return self["demo"]

    @property
    def device_class(self) -> str:
        return self["device_class"]

    @property
    def title(self) -> str:
        return self["title"]

    @property
    def size(self) -> str:
        return self["size"]

    @property
    def digest(self) -> str:
        return self["source_digest"]

    @property
    def wall_time_s(self) -> float:
        return self["wall_time_s"]

    @property
    def is_fixture(self) -> bool:
        return bool(self.get("fixture", False))

    @property
    def metrics(self) -> dict[str, Metric]:
        return {name: Metric.of(name, m) for name, m in self["metrics"].items()}

    @property
    def ceilings(self) -> dict[str, Metric]:
        return {name: Metric.of(name, c) for name, c in self["ceilings"].items()}

    @property
    def checks(self) -> list[Check]:
        return [Check(c["name"], c["passed"], c["detail"], bool(c.get("expected_failure", False)))
                for c in self["checks"]]

    @property
    def tables(self) -> list[dict]:
        return self["tables"]

    @property
    def series(self) -> list[dict]:
        return self["series"]

    @property
    def not_run(self) -> list[tuple[str, str]]:
        return [(n["variant"], n["reason"]) for n in self["not_run"]]

    @property
    def artifacts(self) -> dict[str, str]:
        return self["artifacts"]

    @property
    def provenance(self) -> Provenance:
        p = self["provenance"]
        return Provenance(device_name=p["device_name"], device_class=p["device_class"], device_kind=p["device_kind"],
                          utc=p["utc"], python=p["python"], packages=p["packages"], commit=p.get("commit"),
                          dirty=p.get("dirty"), cuda=p.get("cuda"), driver=p.get("driver"),
                          cpu_count=p.get("cpu_count"), torch_threads=p.get("torch_threads"))


def parse(data, source: str = "record") -> Record:
    """A Record from parsed JSON, or RecordError naming the source and the first bad field."""
    try:
        errors = validate(data)
    except RecursionError:
        raise RecordError(f"{source}: nested too deeply to be a record") from None
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise RecordError(f"{source}: {errors[0]}{more}")
    return Record(data)


def _no_duplicates(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        duplicate = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"the key {json.dumps(duplicate)[:60]} appears twice in one object (which one counts?)")
    return dict(pairs)


def _integer(digits: str) -> int:
    """An integer of the JSON text, refused before Python's own 4,300-digit limit (whose message advises
    changing it)."""
    if len(digits) > 101:
        raise ValueError(f"an integer of {len(digits):,} digits; a record's numbers stay within +-1e100")
    return int(digits)


def loads(text: str | bytes, source: str = "record") -> Record:
    """Parse and validate a record's JSON text: no duplicate key, no number beyond what Python reads, no nesting
    deeper than Python parses; a problem raises RecordError naming the source (one line)."""
    if len(text) > MAX_BYTES:
        raise RecordError(f"{source}: {len(text):,} bytes; a record is at most {MAX_BYTES:,}")
    try:
        if isinstance(text, bytes):  # strictly UTF-8: json.loads would also take UTF-16 and a byte-order mark
            text = text.decode("utf-8")
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_int=_integer)
    except json.JSONDecodeError as e:
        raise RecordError(f"{source}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except UnicodeDecodeError:
        raise RecordError(f"{source}: not UTF-8 text") from None
    except RecursionError:
        raise RecordError(f"{source}: not valid JSON (nested too deeply)") from None
    except ValueError as e:  # a duplicate key; an integer of more than 101 digits
        raise RecordError(f"{source}: {_short(str(e))}") from None
    return parse(data, source)


def read_bounded(path: Path, limit: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, never through a symbolic link, and never blocking
    on a FIFO or a device (OSError with a plain reason otherwise)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError("not a regular file")
        if info.st_size > limit:
            raise OSError(f"{info.st_size:,} bytes; a record is at most {limit:,}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise OSError(f"more than {limit:,} bytes; a record is at most {limit:,}")
        return data
    finally:
        os.close(fd)


def load(path: Path) -> Record:
    """Read and validate a record; a problem raises RecordError naming the file and the field."""
    try:
        data = read_bounded(Path(path))
    except OSError as e:
        reason = "a symbolic link" if e.errno == errno.ELOOP else (e.strerror or str(e))  # O_NOFOLLOW met a link
        raise RecordError(f"{shown(path)}: cannot be read ({reason})") from None
    return loads(data, shown(path))


def write(path: Path, data: dict) -> None:
    """Validate, then write atomically (records/atomic.py): a crash never loses the previous record."""
    errors = validate(data)
    if errors:
        raise RecordError(f"refusing to write {path}: {errors[0]}")
    atomic.write_json(path, data)


def record_path(results_dir: Path, demo: str, device_class: str) -> Path:
    return Path(results_dir) / demo / f"{device_class}.json"
