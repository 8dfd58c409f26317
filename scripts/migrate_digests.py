"""Carry records across a change of the freshness rule: `python -m scripts.migrate_digests --from REV [--apply]`.

A change to how digests are computed (records/digest.py) makes every stored digest differ from the
current one, although nothing was measured differently. Regenerating would throw away records that cost
a GPU window. This command rewrites the digest of each record instead, when it can prove the record is
still what the current code would measure:

1. the record was fresh at REV, by REV's own rule (asked of REV's code, run from an export of it);
2. its measuring code is the same now as at REV (the demo and its local modules, compared as the current
   rule reads code: no comments, no blank lines, no imports of the harness or the core);
3. its declared inputs (records/inputs.py) are what they were: a demo that declares inputs is migrated
   only when its record already stored the hashes of its inputs and they still match.

Anything else is listed as needing a regeneration. Without --apply it only reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from records import atomic, catalog, digest as digests
from records.errors import OneLineParser, fail
from records.paths import REPO_ROOT, RESULTS_DIR

# Asked of the old tree: which of its records were fresh by its own rule (either layout of the core).
OLD_RULE = r"""
import json, sys
try:
    from records import catalog
except ImportError:
    from scripts import catalog
out = {}
for name, demo in catalog.discover().items():
    for path in sorted(catalog.RESULTS_DIR.glob(name + "/*.json")):
        out[f"{name}/{path.stem}"] = catalog.record_freshness(demo, path.stem) == "fresh"
print(json.dumps(out))
"""


def export(rev: str, into: Path) -> Path:
    """The tree at REV, as files (git archive), under ``into``."""
    archive = into / "tree.tar"
    done = subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), rev], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    if done.returncode:
        fail(f"--from {rev}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'git archive failed'}")
    root = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return root


def fresh_at(root: Path) -> dict[str, bool]:
    done = subprocess.run([sys.executable, "-c", OLD_RULE], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    if done.returncode:
        fail(f"the old tree's freshness rule failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measuring_code(demo_file: Path, root: Path) -> dict[str, str]:
    """{path: code lines} of a demo's measuring code in a tree, read by the current rule."""
    return {p.relative_to(root).as_posix(): digests.code_lines(p.read_text(encoding="utf-8"))
            for p in digests.local_sources(demo_file, root)}


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="migrate_digests", description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="rev", required=True, help="the commit whose records were fresh")
    parser.add_argument("--apply", action="store_true", help="rewrite the digests (default: report only)")
    args = parser.parse_args(argv)
    demos = catalog.discover()
    migrated, regenerate = [], []
    with tempfile.TemporaryDirectory() as tmp:
        old_root = export(args.rev, Path(tmp))
        was_fresh = fresh_at(old_root)
        for path in catalog.record_files(RESULTS_DIR):
            key = f"{path.parent.name}/{path.stem}"
            demo = demos.get(path.parent.name)
            if demo is None:
                regenerate.append(f"{key}: no such demo now")
                continue
            rec = json.loads(path.read_text(encoding="utf-8"))
            now = catalog.current_digest(demo, path.stem)
            if rec["source_digest"] == now.value:
                continue  # fresh already
            old_file = old_root / demo.path.relative_to(REPO_ROOT)
            if not was_fresh.get(key):
                regenerate.append(f"{key}: stale (or missing) at {args.rev} already")
            elif not old_file.is_file() or measuring_code(old_file, old_root) != measuring_code(demo.path, REPO_ROOT):
                regenerate.append(f"{key}: its measuring code changed since {args.rev}")
            elif rec.get("inputs", {}) != now.inputs:
                regenerate.append(f"{key}: its declared inputs are not the ones it was measured with")
            else:
                migrated.append(key)
                if args.apply:
                    rec.update(source_digest=now.value, source_files=now.files, inputs=now.inputs)
                    rec.setdefault("settings", {})["protocol_version"] = now.protocol
                    atomic.write_json(path, rec)
    for key in migrated:
        print(f"{'migrated' if args.apply else 'can migrate'} {key}")
    for line in regenerate:
        print(f"regenerate {line}")
    print(f"migrate_digests: {len(migrated)} record(s) {'migrated' if args.apply else 'can be migrated'}, "
          f"{len(regenerate)} to regenerate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
