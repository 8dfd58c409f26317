"""Declared inputs: what a demo reads besides its own code, and the only way it reads it.

A demo (or a local module it imports) that reads another demo's record, a data file or a datasheet entry
declares it once, at module level, with literal arguments:

    INPUTS = declare(records=["kernel_fusion/{device}", "*/cpu"], files=["tests/fixtures/x.json"],
                     datasheets=["h100", "{device}"])

- ``records``: "<demo>/<device class>" of docs/results; ``{device}`` is the class the demo runs on, and
  ``*`` is every other demo (the record gate reads them all);
- ``files``: paths relative to the repository;
- ``datasheets``: entries of records/datasheets.toml, ``*`` for all of them.

The digest (records/digest.py) reads the declaration from the source and hashes what each input holds
now, so a changed input stales its readers, and regen runs readers after what they read. At run time the
demo reads through the same object, which refuses anything it did not declare.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from records import datasheets, record
from records.paths import REPO_ROOT, input_record_demos, input_record_path


class UndeclaredInput(LookupError):
    """A demo read something it did not declare: its record could not say what it depends on."""


class Inputs:
    def __init__(self, records: list[str], files: list[str], datasheet_names: list[str]):
        self.record_patterns = list(records)
        self.files = list(files)
        self.datasheet_names = list(datasheet_names)

    def _allowed(self, patterns: list[str], name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p.replace("{device}", "*")) for p in patterns)

    def record(self, demo: str, device_class: str) -> record.Record | None:
        """The committed record docs/results/<demo>/<class>.json (validated; a GPU campaign's staged copy
        first, see records/paths.py), or None where there is none."""
        if not self._allowed(self.record_patterns, f"{demo}/{device_class}"):
            raise UndeclaredInput(f"record {demo}/{device_class} is not declared in INPUTS = declare(records=[...])")
        path = input_record_path(demo, device_class)
        return record.load(path) if path.is_file() else None

    def records(self, device_class: str, exclude: str = "") -> dict[str, record.Record]:
        """Every committed record of one class (declared as "*/<class>"), by demo, ``exclude`` left out."""
        if not self._allowed([p for p in self.record_patterns if p.startswith("*/")], f"*/{device_class}"):
            raise UndeclaredInput(f"records */{device_class} are not declared in INPUTS = declare(records=[...])")
        return {d: record.load(input_record_path(d, device_class)) for d in input_record_demos(device_class)
                if d != exclude}

    def text(self, path: str) -> str:
        """A data file's text (declared by its path relative to the repository)."""
        if path not in self.files:
            raise UndeclaredInput(f"file {path} is not declared in INPUTS = declare(files=[...])")
        return (REPO_ROOT / path).read_text(encoding="utf-8")

    def datasheet(self, device_class: str) -> dict | None:
        """One entry of records/datasheets.toml, or None when the class has none."""
        if not self._allowed(self.datasheet_names, device_class):
            raise UndeclaredInput(f"datasheet {device_class} is not declared in INPUTS = declare(datasheets=[...])")
        return datasheets.load().get(device_class)

    def datasheets(self) -> dict[str, dict]:
        """Every entry of records/datasheets.toml (declared as datasheets=["*"])."""
        if "*" not in self.datasheet_names:
            raise UndeclaredInput('all datasheets are read, but INPUTS declares datasheets=[...] without "*"')
        return datasheets.load()


def declare(records: list[str] = (), files: list[str] = (), datasheets: list[str] = ()) -> Inputs:
    """Declare what this module reads (see the module's docstring); use literal lists only."""
    for path in files:
        resolved = (REPO_ROOT / path).resolve()
        if Path(path).is_absolute() or REPO_ROOT not in resolved.parents:
            raise ValueError(f"INPUTS: file {path!r} must be a path inside the repository, relative to its root")
    return Inputs(list(records), list(files), list(datasheets))
