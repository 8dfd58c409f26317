"""Take a GPU campaign's records archive home: `python -m scripts.gpu_unpack records.tar.gz [--results-dir DIR]`.

Reads the archive that `scripts.gpu_campaign` hands back (a gzip-compressed tar) once, as a stream, and
validates every member before it copies any. A member is refused, with one line naming it, unless
- it is a plain file named docs/results/<demo>/<device class>.json (no link, no other path, no CPU record);
- it is a well-formed record (records.record) that the publication gate (records.plausibility, the check's
  gate) lets through: its demo and class are the ones its name says, the demo exists, the class is declared
  in records/datasheets.toml, no rate above its datasheet, every check passed, a commit, no fixture, and the
  demo is in the GPU set (records/gpu_set.toml);
- it is no stale record over a fresh one (a fresh record replaces anything; a stale one replaces a stale,
  malformed or missing one, and is copied with a note saying it is stale);
- its target is written through no symbolic link: neither docs/results/<demo>/ nor the file is a link,
  and the file's real path lies inside the results folder.
The accepted records are then copied, atomically, into docs/results/<demo>/ (or --results-dir).

The whole archive is refused, one line and nothing copied, when it crosses a bound (MAX_ARCHIVE_BYTES on
disk, MAX_MEMBERS members, MAX_RECORD_BYTES in one member, MAX_TOTAL_BYTES decompressed: a gzip bomb is
stopped at the bound), names a file twice, cannot be read, or the results folder is a link.
Exit code 0 when every record was copied, 1 when some were refused, 2 for unusable input.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import tarfile
import zlib
from pathlib import Path

from records import atomic, catalog, devices, gpu_set, plausibility, record
from records.digest import FRESH
from records.errors import OneLineParser, fail
from records.paths import RESULTS_DIR, shown

MEMBER = re.compile(r"docs/results/([A-Za-z0-9_][A-Za-z0-9_.\-]*)/([^/]+)\.json")  # fullmatch; class: devices.is_class
MAX_ARCHIVE_BYTES = 64 * 2**20  # the compressed file on disk
MAX_MEMBERS = 1000
MAX_RECORD_BYTES = 8 * 2**20  # one member's data
MAX_TOTAL_BYTES = 256 * 2**20  # everything decompressed: headers, records and the members skipped over


class Unusable(Exception):
    """The archive as a whole cannot be taken home (a bound crossed, a name twice); nothing of it is copied."""


class Refused(Exception):
    """One member cannot be taken home; the message says why, in one line."""


class Capped:
    """The decompressed tar stream, refusing to give more than MAX_TOTAL_BYTES. tarfile reads every byte it
    decompresses through here (the members it skips, long-name and pax headers too), so a bomb stops here."""

    def __init__(self, stream):
        self.stream, self.left = stream, MAX_TOTAL_BYTES

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(self.left + 1 if size < 0 else min(size, self.left + 1))
        self.left -= len(data)
        if self.left < 0:
            raise Unusable(f"more than {MAX_TOTAL_BYTES // 2**20} MiB decompressed")
        return data


def unpack(archive: Path, results_dir: Path = RESULTS_DIR, dry_run: bool = False) -> tuple[list[str], list[str]]:
    """(copied, refused) as one line each; unusable input is one line and exit code 2 (records.errors.fail)."""
    if results_dir.is_symlink():
        fail(f"{results_dir}: the results folder is a symbolic link; gpu_unpack writes through no link")
    if results_dir.exists() and not results_dir.is_dir():
        fail(f"{results_dir}: not a folder")
    try:
        size = archive.stat().st_size
    except OSError as e:
        fail(f"{archive}: cannot be read ({e.strerror})")
    if size > MAX_ARCHIVE_BYTES:
        fail(f"{archive}: refused, nothing copied: {size} bytes, more than {MAX_ARCHIVE_BYTES // 2**20} MiB")
    demos = catalog.discover()
    try:
        accepted, refused = read(archive, results_dir, demos)
    except Unusable as e:
        fail(f"{archive}: refused, nothing copied: {e}")
    except (OSError, EOFError, zlib.error, tarfile.TarError) as e:
        fail(f"{archive}: not a readable gzip-compressed tar, nothing copied ({e})")
    copied = []
    for target, (data, note) in accepted.items():
        if not dry_run:
            try:
                atomic.write_text(target, data.decode("utf-8"))
            except OSError as e:
                fail(f"{shown(target)}: cannot be written ({e.strerror or e}); {len(copied)} copied before it")
        copied.append(f"{shown(target)}{note}")
    return copied, refused


def read(archive: Path, results_dir: Path, demos: dict) -> tuple[dict[Path, tuple[bytes, str]], list[str]]:
    """Stream the archive once: ({target: (record bytes, stale note)}, refused lines). Only a member whose name
    is a record's is read, at most MAX_RECORD_BYTES + 1 bytes of it (its size header is not trusted)."""
    accepted, refused, seen = {}, [], set()
    # tarfile skips an unread member by reading it in bufsize pieces: 1 MiB ones get through a bomb's 256 MiB in 1 s
    with archive.open("rb") as raw, gzip.GzipFile(fileobj=raw) as unzipped, \
            tarfile.open(fileobj=Capped(unzipped), mode="r|", bufsize=2**20) as tar:
        for count, member in enumerate(tar, 1):
            name = member.name if member.name.isprintable() else ascii(member.name)
            if count > MAX_MEMBERS:
                raise Unusable(f"more than {MAX_MEMBERS} members")
            if member.name in seen:
                raise Unusable(f"{name} appears twice")
            seen.add(member.name)
            match = MEMBER.fullmatch(member.name)
            if not match or not member.isfile() or not devices.is_class(match.group(2)):
                refused.append(f"{name}: not a record file (docs/results/<demo>/<class>.json, a plain file)")
                continue
            data = tar.extractfile(member).read(MAX_RECORD_BYTES + 1)
            if len(data) > MAX_RECORD_BYTES:
                raise Unusable(f"{name} holds more than {MAX_RECORD_BYTES // 2**20} MiB, more than a record may")
            try:
                target, note = vet(data, *match.groups(), results_dir, demos)
            except Refused as e:
                refused.append(f"{name}: {e}")
                continue
            accepted[target] = (data, note)
    return accepted, refused


def vet(data: bytes, demo: str, device_class: str, results_dir: Path, demos: dict) -> tuple[Path, str]:
    """Where a member's record goes and its stale note, or Refused saying why it may not go there."""
    try:
        rec = record.parse(json.loads(data.decode("utf-8")), "record")
    except record.RecordError as e:
        raise Refused(str(e)) from None
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, nested too deeply
        raise Refused(f"not valid JSON ({e})") from None
    problems = (["a CPU record (CPU records come from regen here)"] if device_class == devices.CPU else
                plausibility.problems(rec, "record", demo, device_class, demos) or
                ([] if gpu_set.declared().needs_gpu(demo) else [f"{demo} is CPU-only (records/gpu_set.toml)"]))
    if problems:
        raise Refused(f"refused: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    target = record.record_path(results_dir, demo, device_class)
    link = next((p for p in (target.parent, target) if p.is_symlink()), None)
    if link is not None or not target.resolve().is_relative_to(results_dir.resolve()):
        raise Refused(f"refused: {shown(link or target)} is a symbolic link or leads outside {shown(results_dir)}; "
                      "gpu_unpack writes through no link")
    fresh = catalog.freshness(demos[demo], rec) == FRESH
    stale = f"stale: {demo}'s code changed since commit {rec.provenance.commit}"
    if not fresh and catalog.record_freshness(demos[demo], device_class, results_dir) == FRESH:
        raise Refused(f"refused: {stale}, and {shown(target)} is fresh; a stale record never replaces a fresh one")
    return target, "" if fresh else f" ({stale})"


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="gpu_unpack", description=__doc__.splitlines()[0])
    parser.add_argument("archive", type=Path, help="records.tar.gz from a GPU campaign")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--dry-run", action="store_true", help="validate only; copy nothing")
    args = parser.parse_args(argv)
    if not args.archive.is_file():
        fail(f"{args.archive}: no such file")
    copied, refused = unpack(args.archive, args.results_dir.absolute(), args.dry_run)
    for line in copied:
        print(f"{'valid' if args.dry_run else 'copied'} {line}")
    for line in refused:
        print(f"refused {line}")
    print(f"gpu_unpack: {len(copied)} record(s) {'valid' if args.dry_run else 'copied'}, {len(refused)} refused")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
