"""Take a GPU campaign's records archive home: `python -m scripts.gpu_unpack records.tar.gz [--results-dir DIR]`.

Reads the archive that `scripts.gpu_campaign` hands back, and for each member:
- accepts only a plain file named docs/results/<demo>/<device class>.json (no links, no other path);
- validates it as a record (records.record.load) and checks that its demo and device class are
  the ones its name says, that it is no fixture and no CPU record, and that the demo exists here;
- copies it, atomically, into docs/results/<demo>/ (or --results-dir).
Anything else is refused with one line naming the member. It says which copied records are stale
(the demo's code changed since the commit that was measured). Exit code 0 when every record was
copied, 1 when some were refused, 2 for unusable input.
"""

from __future__ import annotations

import re
import sys
import tarfile
import tempfile
from pathlib import Path

from records import atomic, catalog, devices, plausibility, record
from records.errors import OneLineParser, fail
from records.paths import RESULTS_DIR, shown

MEMBER = re.compile(r"^docs/results/([A-Za-z0-9_][A-Za-z0-9_.\-]*)/([^/]+)\.json$")  # the class: devices.is_class
MAX_RECORD_BYTES = 8 * 2**20


def unpack(archive: Path, results_dir: Path = RESULTS_DIR, dry_run: bool = False) -> tuple[list[str], list[str]]:
    """(copied, refused) as one line each."""
    copied, refused = [], []
    demos = catalog.discover()
    try:
        tar = tarfile.open(archive, mode="r:*")
    except (OSError, tarfile.TarError) as e:
        fail(f"{archive}: not a readable archive ({e})")
    with tar, tempfile.TemporaryDirectory() as tmp:
        for member in tar.getmembers():
            name = member.name
            match = MEMBER.match(name)
            if not match or not member.isfile() or not devices.is_class(match.group(2)):
                refused.append(f"{name}: not a record file (docs/results/<demo>/<class>.json, a plain file)")
                continue
            if member.size > MAX_RECORD_BYTES:
                refused.append(f"{name}: {member.size} bytes, more than a record may hold")
                continue
            demo, device_class = match.groups()
            staged = Path(tmp) / demo / f"{device_class}.json"
            staged.parent.mkdir(parents=True, exist_ok=True)
            staged.write_bytes(tar.extractfile(member).read())
            try:
                rec = record.load(staged)
            except record.RecordError as e:
                refused.append(f"{name}: {str(e).replace(str(staged), 'record')}")
                continue
            problems = (["a CPU record (CPU records come from regen here)"] if device_class == "cpu" else
                        plausibility.problems(rec, "record", demo, device_class, demos))
            if problems:
                refused.append(f"{name}: refused: {problems[0]}" + (f" (and {len(problems) - 1} more)"
                                                                     if len(problems) > 1 else ""))
                continue
            target = record.record_path(results_dir, demo, device_class)
            state = catalog.freshness(demos[demo], rec)
            commit = rec.get("provenance", {}).get("commit")
            note = "" if state == "fresh" else f" (stale: {demo}'s code changed since commit {commit})"
            if not dry_run:
                atomic.write_text(target, staged.read_text(encoding="utf-8"))
            copied.append(f"{shown(target)}{note}")
    return copied, refused


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
