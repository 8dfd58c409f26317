"""gpu_unpack against hostile input (issue 31, items 5 and 8): a damaged archive, an unusable results folder, a
member that is a link, a FIFO or a device, a target that is one, a record the check refuses, a name with a line
break. Each is one `error:` line (exit code 2) or one `refused` line per member (exit code 1), never a traceback,
never a hang, and the results folder is left as it was: nothing already measured is lost."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from records import catalog, plausibility, record
from records.paths import REPO_ROOT
from scripts import gpu_unpack

FUSION = "docs/results/kernel_fusion/h100.json"
HANG_GUARD_S = 120  # a FIFO read would block forever; the test fails instead of hanging


def _gpu_record(record_factory) -> dict:
    """A valid (stale) H100 record of kernel_fusion: what the gate lets through."""
    rec = record_factory(device_class="h100")
    rec["provenance"]["device_name"] = "NVIDIA H100 80GB HBM3"
    return rec


@pytest.fixture
def good(record_factory) -> bytes:
    return json.dumps(_gpu_record(record_factory)).encode()


@pytest.fixture
def results(tmp_path, good) -> Path:
    """A results folder that already holds a measured record of another class, which nothing may touch."""
    folder = tmp_path / "results"
    (folder / "kernel_fusion").mkdir(parents=True)
    (folder / "kernel_fusion" / "h200.json").write_bytes(good.replace(b'"h100"', b'"h200"'))
    return folder


def _tar(members: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    """An uncompressed tar of (name, data) files and ready-made headers (links, FIFOs, folders)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    return buffer.getvalue()


def _archive(path: Path, members: list) -> Path:
    path.write_bytes(gzip.compress(_tar(members)))
    return path


def _special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    """Everything under a folder: a file's bytes, or what a link or other entry is (never read)."""
    if not folder.exists():
        return {}
    return {p.relative_to(folder).as_posix(): (f"link to {os.readlink(p)}" if p.is_symlink() else
                                              p.read_bytes() if p.is_file() else "folder" if p.is_dir() else "special")
            for p in sorted(folder.rglob("*"))}


def _run(capsys, archive: Path | str, results: Path | str) -> tuple[int, list[str], list[str]]:
    """gpu_unpack's command line, in this process: (exit code, stdout lines, stderr lines)."""
    try:
        code = gpu_unpack.main([str(archive), "--results-dir", str(results)])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out.splitlines(), err.splitlines()


def _run_process(archive: Path, results: Path) -> tuple[int, list[str], list[str]]:
    """The same in a child process, for what could block: a hang fails the test at HANG_GUARD_S."""
    proc = subprocess.run([sys.executable, "-m", "scripts.gpu_unpack", str(archive), "--results-dir", str(results)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines()


def _one_error(code: int, out: list[str], err: list[str], says: str) -> None:
    assert code == 2 and out == [] and len(err) == 1 and err[0].startswith("error: ") and says in err[0], (out, err)


# -- a damaged archive: one line, nothing copied ------------------------------------------------------------

CORRUPT = "not a readable tar archive (truncated or corrupt): "


@pytest.mark.parametrize("damage", ["truncated-tar.gz", "truncated-tar", "plain-tar", "gzip-of-garbage",
                                    "bad-gzip-header", "empty", "garbage-tar-in-gzip"])
def test_a_damaged_archive_is_one_line_and_copies_nothing(tmp_path, capsys, good, results, damage):
    tar = _tar([(FUSION, good), ("docs/results/autotune/h100.json", good)])
    data = {"truncated-tar.gz": gzip.compress(tar)[:len(gzip.compress(tar)) // 2],
            "truncated-tar": tar[:700],
            "plain-tar": tar,  # the campaign hands back a gzip-compressed tar
            "gzip-of-garbage": gzip.compress(b"not a tar at all " * 100),
            "bad-gzip-header": b"\x1f\x8b" + b"garbage" * 10,
            "empty": b"",
            "garbage-tar-in-gzip": gzip.compress(tar[:600] + bytes(range(256)) * 4)}[damage]
    archive = tmp_path / f"{damage}.tar.gz"
    archive.write_bytes(data)
    before = _snapshot(results)
    code, out, err = _run(capsys, archive, results)
    _one_error(code, out, err, CORRUPT)
    assert err[0].startswith(f"error: {archive}: {CORRUPT}")
    assert _snapshot(results) == before


def test_an_archive_name_with_a_line_break_stays_one_line(tmp_path, capsys, results):
    archive = tmp_path / "records\nerror: forged.tar.gz"
    archive.write_bytes(b"\x1f\x8bnot gzip")
    code, out, err = _run(capsys, archive, results)
    _one_error(code, out, err, CORRUPT)
    assert "records\\nerror: forged.tar.gz" in err[0]


def test_a_missing_archive_is_one_line(tmp_path, capsys, results):
    code, out, err = _run(capsys, tmp_path / "nope.tar.gz", results)
    _one_error(code, out, err, "nope.tar.gz: cannot be read (No such file or directory)")


# -- the archive itself: a regular file, never a FIFO or a device -------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero", "folder"])
def test_an_archive_that_is_no_regular_file_is_refused_without_reading_it(tmp_path, results, kind):
    archive = tmp_path / "records.tar.gz"
    if kind == "fifo":
        os.mkfifo(archive)  # no writer: a read would block forever
    elif kind == "link-to-dev-zero":
        archive.symlink_to("/dev/zero")  # a read would never end
    else:
        archive.mkdir()
    before = _snapshot(results)
    code, out, err = _run_process(archive, results)
    _one_error(code, out, err, "refused, nothing copied: not a regular file")
    assert _snapshot(results) == before


# -- members: nothing but a regular file is read ----------------------------------------------------------

@pytest.mark.parametrize("member", [
    _special(FUSION, tarfile.SYMTYPE, "/dev/zero"),
    _special(FUSION, tarfile.LNKTYPE, "/dev/zero"),
    _special(FUSION, tarfile.FIFOTYPE),
    _special(FUSION, tarfile.CHRTYPE),
    _special(FUSION, tarfile.DIRTYPE),
], ids=["symlink", "hardlink", "fifo", "char-device", "folder"])
def test_a_record_member_that_is_no_regular_file_is_refused(tmp_path, results, member):
    before = _snapshot(results)
    code, out, err = _run_process(_archive(tmp_path / "r.tar.gz", [member]), results)
    assert code == 1 and err == [] and len(out) == 2, (out, err)
    assert out[0] == f"refused {FUSION}: not a record file (docs/results/<demo>/<class>.json, a plain file)"
    assert _snapshot(results) == before


@pytest.mark.parametrize("name", ["docs/results/kernel_fusion/h100.json\nerror: forged",
                                  "docs/results/kernel_fusion/h100.json\r",
                                  "docs/results/kernel_fusion/h100\u2028.json",
                                  "../../etc/passwd\n"])
def test_a_member_name_with_a_line_break_is_one_refusal_line_shown_by_ascii(tmp_path, capsys, results, name):
    before = _snapshot(results)
    code, out, err = _run(capsys, _archive(tmp_path / "r.tar.gz", [(name, b"{}")]), results)
    assert code == 1 and err == [] and len(out) == 2, out  # the refusal, the summary
    assert out[0].startswith(f"refused {ascii(name)}: ") and out[1].startswith("gpu_unpack: 0 record(s) copied")
    assert _snapshot(results) == before


# -- the target: never read or replaced unless it is a regular file ------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "folder", "link-to-dev-zero"])
def test_a_target_that_is_no_regular_file_is_neither_read_nor_replaced(tmp_path, results, good, kind):
    target = results / "kernel_fusion" / "h100.json"
    if kind == "fifo":
        os.mkfifo(target)  # reading it to learn whether it is fresh would block forever
    elif kind == "folder":
        target.mkdir()
    else:
        target.symlink_to("/dev/zero")
    before = _snapshot(results)
    code, out, err = _run_process(_archive(tmp_path / "r.tar.gz", [(FUSION, good)]), results)
    assert code == 1 and err == [] and len(out) == 2 and out[0].startswith(f"refused {FUSION}: refused: "), out
    assert _snapshot(results) == before


def test_a_demo_folder_that_is_a_file_is_refused(tmp_path, capsys, good):
    results = tmp_path / "results"
    results.mkdir()
    (results / "kernel_fusion").write_text("kept")
    code, out, err = _run(capsys, _archive(tmp_path / "r.tar.gz", [(FUSION, good)]), results)
    assert code == 1 and err == [] and "is there but is not a folder" in out[0], out
    assert (results / "kernel_fusion").read_text() == "kept"


# -- the results folder: a folder, reached through no link ---------------------------------------------------

def test_a_results_folder_that_is_a_file_is_one_line(tmp_path, capsys, good, monkeypatch):
    archive = _archive(tmp_path / "r.tar.gz", [(FUSION, good)])
    readme = (REPO_ROOT / "README.md").read_bytes()
    monkeypatch.chdir(REPO_ROOT)
    for results in ("README.md", "README.md/results"):
        code, out, err = _run(capsys, archive, results)
        _one_error(code, out, err, "README.md: not a folder")
    assert (REPO_ROOT / "README.md").read_bytes() == readme


def test_a_linked_folder_above_the_results_folder_inside_the_repository_is_refused(tmp_path, capsys, good,
                                                                                    monkeypatch):
    """A committed link (docs -> elsewhere) would send every record outside the repository."""
    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    (elsewhere / "results").mkdir(parents=True)
    repo.mkdir()
    (repo / "docs").symlink_to(elsewhere)
    monkeypatch.setattr(gpu_unpack, "REPO_ROOT", repo)
    code, out, err = _run(capsys, _archive(tmp_path / "r.tar.gz", [(FUSION, good)]), repo / "docs" / "results")
    _one_error(code, out, err, "a symbolic link above or at the results folder")
    assert _snapshot(elsewhere) == {"results": "folder"}


def test_a_linked_demo_folder_is_refused(tmp_path, capsys, good, results):
    outside = tmp_path / "outside"
    outside.mkdir()
    (results / "autotune").symlink_to(outside)  # as if committed
    rec = json.loads(good)
    rec.update(demo="autotune", module="demos.t4_kernels.autotune")
    before = _snapshot(results)
    code, out, err = _run(capsys, _archive(tmp_path / "r.tar.gz", [("docs/results/autotune/h100.json",
                                                                     json.dumps(rec).encode())]), results)
    assert code == 1 and err == [] and "symbolic link" in out[0], out
    assert _snapshot(results) == before and list(outside.iterdir()) == []


# -- what the check refuses, unpack refuses: the record's own parse and gate ---------------------------------

@pytest.mark.parametrize("spoil, says", [
    (lambda text: text.replace('"value": 10.0', '"value": ' + "1" * 5000, 1), "digits"),
    (lambda text: text.replace('"value": 10.0', '"value": 1' + "0" * 400, 1), "an integer of 401 digits"),
    (lambda text: text.replace('"value": 10.0', '"value": 1e999', 1), "metrics.chain.eager.gbps.value"),
    (lambda text: text.replace('"artifacts": {}', '"artifacts": ' + "[" * 100_000 + "]" * 100_000, 1), "nested"),
    (lambda text: text.replace('"schema": 1', '"schema": 1, "schema": 1', 1), "appears twice"),
    (lambda text: text.replace('"passed": true', '"passed": false', 1), "failed"),
], ids=["huge-integer", "ten-to-the-400", "infinite-number", "deep-nesting", "duplicate-key", "failed-check"])
def test_a_record_the_check_refuses_is_refused(tmp_path, capsys, good, results, spoil, says):
    sent = spoil(good.decode()).encode()
    assert sent != good
    on_disk = tmp_path / "as-the-check-reads-it.json"
    on_disk.write_bytes(sent)
    try:  # the check's own reading and gate (scripts/check.py: record.load, then plausibility) refuse it
        rec = record.load(on_disk)
    except record.RecordError:
        pass
    else:
        assert plausibility.problems(rec, "record", "kernel_fusion", "h100", catalog.discover())
    before = _snapshot(results)
    code, out, err = _run(capsys, _archive(tmp_path / "r.tar.gz", [(FUSION, sent)]), results)
    assert code == 1 and err == [] and len(out) == 2 and out[0].startswith(f"refused {FUSION}: "), out
    assert says in out[0], out
    assert _snapshot(results) == before


@pytest.mark.parametrize("encode", [lambda text: "\ufeff".encode() + text.encode(), lambda text: text.encode("utf-16")],
                         ids=["byte-order-mark", "utf-16"])
def test_a_record_that_is_not_plain_utf8_is_refused(tmp_path, capsys, good, results, encode):
    """The copy is written as UTF-8 text, as the harness writes every record."""
    before = _snapshot(results)
    code, out, err = _run(capsys, _archive(tmp_path / "r.tar.gz", [(FUSION, encode(good.decode()))]), results)
    assert code == 1 and err == [] and len(out) == 2 and out[0].startswith(f"refused {FUSION}: record: "), out
    assert _snapshot(results) == before


# -- a refused archive writes nothing --------------------------------------------------------------------------

def test_an_archive_refused_after_a_good_record_writes_nothing(tmp_path, capsys, good, results):
    """The good record comes first; the archive is refused further on (a name twice), so it is not copied."""
    target = results / "kernel_fusion" / "h100.json"
    target.write_text("{not json: a malformed record, which a good one would replace}")
    before = _snapshot(results)
    twice = tmp_path / "twice.tar.gz"
    twice.write_bytes(gzip.compress(_tar([(FUSION, good), ("x", b""), (FUSION, good)])))
    code, out, err = _run(capsys, twice, results)
    _one_error(code, out, err, f"refused, nothing copied: {FUSION} appears twice")
    assert _snapshot(results) == before
