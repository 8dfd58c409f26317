"""Take a GPU campaign's records archive home: `python -m scripts.gpu_unpack records.tar.gz [--results-dir DIR]`.

Reads the archive that `scripts.gpu_campaign` hands back (a gzip-compressed tar, a regular file) once, as a
stream, then validates every member, then copies; nothing is written before everything was read and judged.
A member is refused, with one line naming it (a name with a control character shown as Python's ascii()), unless
- it is a plain file named docs/results/<demo>/<device class>.json (no link, no FIFO, no other path, no CPU
  record); nothing but such a member is ever read, and at most MAX_RECORD_BYTES of it;
- it is a well-formed record (records.record) that the publication gate (records.plausibility, the check's
  gate) lets through: its demo and class are the ones its name says, the demo exists, the class is declared
  in records/datasheets.toml, no rate above its datasheet, every check passed, a commit, no fixture, and the
  demo is in the GPU set (records/gpu_set.toml); these are the check's per-record rules (scripts/check.py);
- it is no stale record over a fresh one (a fresh record replaces anything; a stale one replaces a stale,
  malformed or missing one, and is copied with a note saying it is stale); freshness is judged as it will be
  after the copy, so a record that reads other records (machine_laws reads kernel_fusion's) is judged against
  the ones it arrives with;
- its target is written through no symbolic link: neither docs/results/<demo>/ nor the file is a link (nor
  anything but a folder and a regular file), and the file's real path lies inside the results folder.
The accepted records are then copied, atomically (records/atomic.py), into docs/results/<demo>/ (or --results-dir).

The whole archive is refused, one line and nothing copied, when it crosses a bound (MAX_ARCHIVE_BYTES on
disk, MAX_MEMBERS members, MAX_RECORD_BYTES in one member, MAX_TOTAL_BYTES decompressed: a gzip bomb is
stopped at the bound), names a file twice, is no regular file, or cannot be read (truncated or corrupt); so is
the results folder when it is not a folder, or it or a folder above it inside the repository is a link.
Exit code 0 when every record was copied, 1 when some were refused, 2 for unusable input.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import stat
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import NoReturn

from records import atomic, catalog, datasheets, devices, gpu_set, plausibility, record
from records.digest import FRESH
from records.errors import OneLineParser, fail, one_line, quoted
from records.paths import REPO_ROOT, RESULTS_DIR, STAGED_RESULTS_ENV, shown

MEMBER = re.compile(r"docs/results/([A-Za-z0-9_][A-Za-z0-9_.\-]*)/([^/]+)\.json")  # fullmatch; class: devices.is_class
MAX_ARCHIVE_BYTES = 64 * 2**20  # the compressed file on disk
MAX_MEMBERS = 1000
MAX_RECORD_BYTES = record.MAX_BYTES  # one member's data: the most a record may be
MAX_TOTAL_BYTES = 256 * 2**20  # everything decompressed: headers, records and the members skipped over
# What a damaged archive raises while it is read: gzip's and tarfile's errors, and a name or number it cannot decode.
UNREADABLE = (OSError, EOFError, zlib.error, tarfile.TarError, ValueError)


class Unusable(Exception):
    """The archive as a whole cannot be taken home (a bound crossed, a name twice); nothing of it is copied."""


class Refused(Exception):
    """One member cannot be taken home; the message says why, in one line."""


def refuse(message: str) -> NoReturn:
    """records.errors.fail, kept to one line whatever a path or an exception's message holds."""
    fail(message)


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
    """(copied, refused) as one line each; unusable input is one line and exit code 2 (records.errors.fail).
    Reads everything, then judges everything, then writes: a refused archive writes nothing."""
    results_dir = usable_results_dir(results_dir)
    demos = catalog.discover()
    try:
        with open_archive(archive) as raw:
            members = read(raw)
    except Unusable as e:
        refuse(f"{archive}: refused, nothing copied: {e}")
    except UNREADABLE as e:
        refuse(f"{archive}: not a readable tar archive (truncated or corrupt): {getattr(e, 'strerror', None) or e}")
    accepted, refused = vet_all(members, results_dir, demos)
    if accepted:  # a record may read others (machine_laws reads kernel_fusion's): judge again as after the copy
        with tempfile.TemporaryDirectory(prefix="gpu_unpack_") as stage, staged_results(Path(stage)):
            for target, (data, _) in accepted.items():
                (Path(stage) / target.parent.name).mkdir(exist_ok=True)
                (Path(stage) / target.parent.name / target.name).write_bytes(data)
            accepted, refused = vet_all(members, results_dir, demos)
    copied = []
    for target, (data, note) in accepted.items():
        if not dry_run:
            try:
                atomic.write_text(target, data.decode("utf-8"))
            except OSError as e:
                refuse(f"{shown(target)}: cannot be written ({e.strerror or e}); {len(copied)} copied before it")
        copied.append(one_line(f"{shown(target)}{note}"))
    return copied, refused


def vet_all(members, results_dir: Path, demos: dict) -> tuple[dict, list[str]]:
    """({target: (data, note)}, [refusal lines]): every member judged by vet."""
    accepted, refused = {}, []
    for name, data in members:
        try:
            target, note = vet(data, name, results_dir, demos)
        except Refused as e:
            refused.append(one_line(f"{quoted(name)}: {e}"))
            continue
        accepted[target] = (data, note)
    return accepted, refused


@contextlib.contextmanager
def staged_results(folder: Path):
    """Input records are read from `folder` first while inside (records/paths.py, the campaign's staging rule):
    the archive's accepted records, so a record that reads another is judged against the copy it arrives with."""
    before = os.environ.get(STAGED_RESULTS_ENV)
    os.environ[STAGED_RESULTS_ENV] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(STAGED_RESULTS_ENV, None)
        else:
            os.environ[STAGED_RESULTS_ENV] = before


def usable_results_dir(results_dir: Path) -> Path:
    """The results folder as an absolute path, or one line and exit code 2: it must be a folder (or not exist yet,
    below a folder), and neither it nor a folder above it inside the repository may be a symbolic link (a
    committed link would send the records anywhere)."""
    results_dir = Path(os.path.abspath(results_dir))
    above = [p for p in results_dir.parents if p != REPO_ROOT and p.is_relative_to(REPO_ROOT)]
    for path in (results_dir, *above):
        if path.is_symlink():
            refuse(f"{shown(path)}: a symbolic link above or at the results folder; gpu_unpack writes through no link")
    existing = next(p for p in (results_dir, *results_dir.parents) if p.exists())
    if not existing.is_dir():
        refuse(f"{shown(existing)}: not a folder, so the results folder ({shown(results_dir)}) cannot be written")
    return results_dir


def open_archive(archive: Path):
    """The archive, open for reading, or one line and exit code 2. It is opened without blocking (a FIFO would wait
    for a writer) and kept only when it is a regular file (a device never ends) of at most MAX_ARCHIVE_BYTES."""
    try:
        fd = os.open(archive, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        refuse(f"{archive}: cannot be read ({e.strerror})")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ARCHIVE_BYTES:
        os.close(fd)
        refuse(f"{archive}: refused, nothing copied: " + ("not a regular file" if not stat.S_ISREG(info.st_mode) else
                                                          f"{info.st_size} bytes, more than "
                                                          f"{MAX_ARCHIVE_BYTES // 2**20} MiB"))
    return open(fd, "rb")


def read(raw) -> list[tuple[str, bytes | None]]:
    """Stream the open archive once: [(member name, data)] for every member, in order; only a regular-file member
    whose name is a record's is read, at most MAX_RECORD_BYTES + 1 bytes of it (its size header is not trusted); any
    other member is listed with no data. Unusable when the archive crosses a bound or names a file twice."""
    members, seen = [], set()
    # tarfile skips an unread member by reading it in bufsize pieces: 1 MiB ones get through a bomb's 256 MiB in 1 s
    with gzip.GzipFile(fileobj=raw) as unzipped, \
            tarfile.open(fileobj=Capped(unzipped), mode="r|", bufsize=2**20) as tar:
        for count, member in enumerate(tar, 1):
            if count > MAX_MEMBERS:
                raise Unusable(f"more than {MAX_MEMBERS} members")
            if member.name in seen:
                raise Unusable(f"{quoted(member.name)} appears twice")
            seen.add(member.name)
            if not (member.isfile() and MEMBER.fullmatch(member.name)):
                members.append((member.name, None))
                continue
            data = tar.extractfile(member).read(MAX_RECORD_BYTES + 1)
            if len(data) > MAX_RECORD_BYTES:
                raise Unusable(f"{quoted(member.name)} holds more than {MAX_RECORD_BYTES // 2**20} MiB, "
                               "more than a record may")
            members.append((member.name, data))
    return members


def vet(data: bytes | None, name: str, results_dir: Path, demos: dict) -> tuple[Path, str]:
    """Where a member's record goes and its stale note, or Refused saying why it may not go there: the check's
    per-record rules (scripts/check.py: record.loads, plausibility.problems, the GPU set), then the target's."""
    match = MEMBER.fullmatch(name)
    if data is None or not match or not devices.is_class(match.group(2)):
        raise Refused("not a record file (docs/results/<demo>/<class>.json, a plain file)")
    demo, device_class = match.groups()
    try:  # decoded here: json.loads would take UTF-16 bytes too, which the copy, written as UTF-8 text, is not
        rec = record.loads(data.decode("utf-8"), "record")
    except UnicodeDecodeError:
        raise Refused("record: not UTF-8 text") from None
    except record.RecordError as e:
        raise Refused(str(e)) from None
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
    for path, kind, is_kind in ((target.parent, "folder", stat.S_ISDIR), (target, "regular file", stat.S_ISREG)):
        if path.exists() and not is_kind(path.lstat().st_mode):  # only a record is replaced, only a folder written in
            raise Refused(f"refused: {shown(path)} is there but is not a {kind}; remove it first")
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
    datasheets.require()  # the gate bounds every record by it: a nan peak is one line here, not a traceback
    copied, refused = unpack(args.archive, args.results_dir, args.dry_run)
    for line in copied:
        print(f"{'valid' if args.dry_run else 'copied'} {line}")
    for line in refused:
        print(f"refused {line}")
    print(f"gpu_unpack: {len(copied)} record(s) {'valid' if args.dry_run else 'copied'}, {len(refused)} refused")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
