"""gpu_unpack as a gate (issue 29, item 6): it refuses what the check refuses, never puts a stale record over a
fresh one, stops a gzip bomb at its bounds with nothing copied, writes through no symbolic link, and says
every refusal in one line with exit code 1 (a record refused) or 2 (unusable input)."""

from __future__ import annotations

import gzip
import json
import os
import tarfile
import time
from pathlib import Path

import pytest

from records import catalog
from scripts import gpu_unpack

FUSION = "docs/results/kernel_fusion/h100.json"
ZEROS_MIB = gzip.compress(bytes(2**20))  # a gzip member of 1 MiB of zeros: ~1 KB; concatenated, they decompress as one


def _gpu(record_factory, device_class: str = "h100", **overrides) -> dict:
    rec = record_factory(device_class=device_class, **overrides)
    rec["provenance"]["device_name"] = "NVIDIA H100 80GB HBM3"
    return rec


def _fresh(record_factory) -> dict:
    return _gpu(record_factory, source_digest=catalog.discover()["kernel_fusion"].digest("h100"))


@pytest.fixture
def good(record_factory) -> bytes:
    """A valid (stale) H100 record of kernel_fusion, as the archive holds it."""
    return json.dumps(_gpu(record_factory)).encode()


def _member(name: str | tarfile.TarInfo, data: bytes = b"") -> bytes:
    """One tar member: its header, then its data padded to 512-byte blocks."""
    info = name if isinstance(name, tarfile.TarInfo) else tarfile.TarInfo(name)
    info.size = info.size or len(data)
    return info.tobuf(format=tarfile.GNU_FORMAT) + data + bytes(-len(data) % 512)


def _tar_bytes(members: dict[str, bytes]) -> bytes:
    return b"".join(_member(name, data) for name, data in members.items()) + bytes(1024)  # + end of archive


def _archive(path: Path, members: dict[str, bytes]) -> Path:
    path.write_bytes(gzip.compress(_tar_bytes(members)))
    return path


def _bomb(path: Path, good: bytes, header: tarfile.TarInfo, mib: int = 600) -> Path:
    """A valid record, then a member whose header claims `mib` MiB, then that many MiB of zeros: ~mib KB on disk."""
    header.size = mib * 2**20
    with path.open("wb") as f:
        f.write(gzip.compress(_member(FUSION, good) + _member(header)))
        for _ in range(mib):
            f.write(ZEROS_MIB)
    return path


def _run(capsys, archive: Path, results: Path) -> tuple[int, list[str], list[str]]:
    """gpu_unpack's command line, in this process: (exit code, stdout lines, stderr lines)."""
    try:
        code = gpu_unpack.main([str(archive), "--results-dir", str(results)])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


# -- 1. what the check refuses ---------------------------------------------------------------------------

def _too_fast(rec):
    rec["metrics"]["chain.eager.gbps"].update(value=99999.0, fraction_of_ceiling=99999.0 / 20.0)


def _no_commit(rec):
    rec["provenance"]["commit"] = None


@pytest.mark.parametrize("device_class, spoil, says", [
    ("h100", _too_fast, "99,999 GB/s exceeds the H100 datasheet memory bandwidth"),
    ("b200", lambda rec: None, "device class 'b200' is not declared in records/datasheets.toml"),
    ("h100", _no_commit, "provenance.commit is null"),
], ids=["rate-above-datasheet", "undeclared-class", "null-commit"])
def test_unpack_refuses_what_the_check_refuses(tmp_path, capsys, record_factory, device_class, spoil, says):
    rec = _gpu(record_factory, device_class)
    spoil(rec)
    name = f"docs/results/kernel_fusion/{device_class}.json"
    archive = _archive(tmp_path / "r.tar.gz", {name: json.dumps(rec).encode()})
    code, out, err = _run(capsys, archive, tmp_path / "results")
    refused = [line for line in out if line.startswith("refused ")]
    assert code == 1 and len(refused) == 1 and says in refused[0], out
    assert not (tmp_path / "results").exists() and err == []


def test_unpack_refuses_a_gpu_record_of_a_cpu_only_demo(tmp_path, capsys, record_factory):
    rec = _gpu(record_factory, "h100")
    rec["demo"] = "gbdt"
    archive = _archive(tmp_path / "r.tar.gz", {"docs/results/gbdt/h100.json": json.dumps(rec).encode()})
    code, out, _ = _run(capsys, archive, tmp_path / "results")
    assert code == 1 and "gbdt is CPU-only (records/gpu_set.toml)" in out[0], out
    assert not (tmp_path / "results").exists()


# -- 2. never a stale record over a fresh one --------------------------------------------------------------

def test_unpack_never_replaces_a_fresh_record_with_a_stale_one(tmp_path, capsys, record_factory):
    target = tmp_path / "results" / "kernel_fusion" / "h100.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(_fresh(record_factory)))
    before = target.read_bytes()
    archive = _archive(tmp_path / "r.tar.gz", {FUSION: json.dumps(_gpu(record_factory)).encode()})  # a stale digest
    code, out, _ = _run(capsys, archive, tmp_path / "results")
    assert code == 1 and target.read_bytes() == before
    assert out[0].startswith(f"refused {FUSION}: refused: stale") and "is fresh" in out[0], out


@pytest.mark.parametrize("existing, incoming, note", [
    ("absent", "stale", True), ("stale", "stale", True), ("malformed", "stale", True),
    ("absent", "fresh", False), ("stale", "fresh", False), ("fresh", "fresh", False), ("malformed", "fresh", False),
])
def test_unpack_copies_fresh_over_anything_and_stale_over_stale_or_nothing(tmp_path, capsys, record_factory,
                                                                           existing, incoming, note):
    make = {"fresh": lambda: json.dumps(_fresh(record_factory)), "stale": lambda: json.dumps(_gpu(record_factory)),
            "malformed": lambda: "{not json"}
    target = tmp_path / "results" / "kernel_fusion" / "h100.json"
    if existing != "absent":
        target.parent.mkdir(parents=True)
        target.write_text(make[existing]())
    sent = make[incoming]().encode()
    code, out, _ = _run(capsys, _archive(tmp_path / "r.tar.gz", {FUSION: sent}), tmp_path / "results")
    assert code == 0 and target.read_bytes() == sent, out
    stale_note = "(stale: kernel_fusion's code changed since commit"
    assert out[0].startswith("copied ") and (stale_note in out[0]) == note


def test_a_record_that_reads_another_is_judged_against_the_one_it_arrives_with(tmp_path, capsys, record_factory,
                                                                               monkeypatch):
    """machine_laws reads kernel_fusion's and layout_and_padding's records of its class: arriving with a new
    kernel_fusion record, it is fresh after the copy, and gpu_unpack says so (it once judged it against the
    records already on disk, and called a fresh record stale)."""
    from records.paths import STAGED_RESULTS_ENV

    fusion = json.dumps(_gpu(record_factory)).encode()  # no kernel_fusion/h100 record is on disk
    stage = tmp_path / "stage"
    (stage / "kernel_fusion").mkdir(parents=True)
    (stage / "kernel_fusion" / "h100.json").write_bytes(fusion)
    monkeypatch.setenv(STAGED_RESULTS_ENV, str(stage))
    laws = _gpu(record_factory, source_digest=catalog.discover()["machine_laws"].digest("h100"))
    monkeypatch.delenv(STAGED_RESULTS_ENV)
    laws["demo"] = "machine_laws"
    archive = _archive(tmp_path / "r.tar.gz", {FUSION: fusion,
                                               "docs/results/machine_laws/h100.json": json.dumps(laws).encode()})
    code, out, _ = _run(capsys, archive, tmp_path / "results")
    assert code == 0 and len(out) == 3, out
    assert any(line.startswith("copied ") and "machine_laws/h100.json" in line and "stale" not in line for line in out), out
    assert STAGED_RESULTS_ENV not in os.environ  # the staging is undone


# -- 3. bounds: a bomb is stopped, and nothing of its archive is copied --------------------------------------

def _long_name() -> tarfile.TarInfo:
    info = tarfile.TarInfo("././@LongLink")
    info.type = tarfile.GNUTYPE_LONGNAME  # tarfile reads this header's data whole, before it yields a member
    return info


@pytest.mark.parametrize("header, says", [
    (tarfile.TarInfo("docs/results/autotune/h100.json"), "holds more than 8 MiB"),
    (tarfile.TarInfo("junk.bin"), "more than 256 MiB decompressed"),  # never read, but skipped over
    (_long_name(), "more than 256 MiB decompressed"),
], ids=["record-member", "skipped-member", "long-name-header"])
def test_a_gzip_bomb_is_stopped_at_the_bound_and_nothing_is_copied(tmp_path, capsys, good, header, says):
    archive = _bomb(tmp_path / "bomb.tar.gz", good, header)
    assert archive.stat().st_size < 2 * 2**20  # 600 MiB decompressed
    started = time.perf_counter()
    code, out, err = _run(capsys, archive, tmp_path / "results")
    seconds = time.perf_counter() - started
    assert code == 2 and len(err) == 1 and "refused, nothing copied" in err[0] and says in err[0], err
    assert out == [] and not (tmp_path / "results").exists()  # the valid record before the bomb is not copied
    assert seconds < 5, f"{seconds:.1f} s to stop a bomb"


def test_too_many_members_or_too_large_a_file_or_a_name_twice_refuse_the_whole_archive(tmp_path, capsys, good):
    many = _archive(tmp_path / "many.tar.gz", {FUSION: good, **{f"x/{i}": b"" for i in range(gpu_unpack.MAX_MEMBERS)}})
    twice = tmp_path / "twice.tar.gz"
    twice.write_bytes(gzip.compress(_member(FUSION, good) + _tar_bytes({FUSION: good})))
    large = tmp_path / "large.tar.gz"
    with large.open("wb") as f:
        f.truncate(gpu_unpack.MAX_ARCHIVE_BYTES + 1)  # sparse: nothing on disk
    for archive, says in ((many, "more than 1000 members"), (twice, f"{FUSION} appears twice"),
                          (large, "more than 64 MiB")):
        code, out, err = _run(capsys, archive, tmp_path / "results")
        assert code == 2 and len(err) == 1 and says in err[0] and out == [], (archive.name, err)
        assert not (tmp_path / "results").exists()


# -- 4. no writing through a symbolic link -------------------------------------------------------------------

def test_unpack_refuses_a_linked_results_folder(tmp_path, capsys, good):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "results").symlink_to(real)
    code, out, err = _run(capsys, _archive(tmp_path / "r.tar.gz", {FUSION: good}),
                          tmp_path / "results")
    assert code == 2 and len(err) == 1 and "symbolic link" in err[0] and out == []
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("linked", ["demo-folder", "file"])
def test_unpack_refuses_to_write_through_a_linked_demo_folder_or_file(tmp_path, capsys, good, linked):
    results, outside = tmp_path / "results", tmp_path / "outside"
    outside.mkdir()
    (outside / "h100.json").write_text("kept")
    if linked == "demo-folder":
        results.mkdir()
        (results / "kernel_fusion").symlink_to(outside)
    else:
        (results / "kernel_fusion").mkdir(parents=True)
        (results / "kernel_fusion" / "h100.json").symlink_to(outside / "h100.json")
    code, out, err = _run(capsys, _archive(tmp_path / "r.tar.gz", {FUSION: good}), results)
    assert code == 1 and err == [] and "symbolic link" in out[0] and out[0].startswith(f"refused {FUSION}:"), out
    assert (outside / "h100.json").read_text() == "kept" and list(outside.iterdir()) == [outside / "h100.json"]


# -- 5. one line, never a traceback -----------------------------------------------------------------------

def test_every_refusal_is_one_line(tmp_path, capsys, good):
    nested = b"[" * 100_000 + b"]" * 100_000
    archive = _archive(tmp_path / "r.tar.gz", {
        "docs/results/kernel_fusion/h100.json\n": b"x",  # a name with a line break
        "docs/results/kernel_fusion/h200.json": nested,  # deeper than the JSON reader recurses
        "docs/results/autotune/h100.json": b"\xff\xfe",  # not UTF-8
        FUSION: good,
    })
    code, out, err = _run(capsys, archive, tmp_path / "results")
    assert code == 1 and err == [] and len(out) == 5, out  # 1 copied, 3 refused, the summary
    assert "'docs/results/kernel_fusion/h100.json\\n'" in out[1] and "not valid JSON" in out[2] + out[3]
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(archive.read_bytes()[:len(archive.read_bytes()) // 2])
    not_gzip = tmp_path / "plain.tar"
    not_gzip.write_bytes(_tar_bytes({FUSION: b"{}"}))
    for broken in (truncated, not_gzip):
        code, out, err = _run(capsys, broken, tmp_path / "other")
        assert code == 2 and len(err) == 1 and "not a readable tar archive (truncated or corrupt): " in err[0] and out == [], err
        assert not (tmp_path / "other").exists()
