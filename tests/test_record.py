"""The result record: schema validation naming the field, atomic writes, a failed run writes nothing."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, make_record
from records import record


def test_valid_record_passes():
    assert record.validate(make_record()) == []


@pytest.mark.parametrize("mutate, field", [
    (lambda r: r.pop("source_digest"), "source_digest"),
    (lambda r: r["metrics"]["chain.eager.gbps"].update(value="fast"), "metrics.chain.eager.gbps.value"),
    (lambda r: r["metrics"]["chain.eager.gbps"].update(value=float("nan")), "metrics.chain.eager.gbps.value"),
    (lambda r: r["metrics"]["chain.eager.gbps"].update(ceiling="nope"), "metrics.chain.eager.gbps.ceiling"),
    (lambda r: r["tables"][0]["rows"].append(["too", "many", "cells"]), "tables[0].rows[2]"),
    (lambda r: r["series"][0]["lines"][0].update(y=[1.0]), "series[0].lines[0]"),
    (lambda r: r["series"][0]["lines"][0].update(spread=[1.2]), "series[0].lines[0]"),
    (lambda r: r["series"][0]["lines"][0].update(spread=[0.5, 1.2]), "series[0].lines[0].spread[0]"),
    (lambda r: r["checks"][0].update(passed="yes"), "checks[0].passed"),
    (lambda r: r.update(schema=99), "schema"),
    (lambda r: r["provenance"].pop("utc"), "provenance.utc"),
    (lambda r: r.update(metrics=[]), "metrics"),
])
def test_malformed_record_names_the_field(mutate, field):
    rec = make_record()
    mutate(rec)
    errors = record.validate(rec)
    assert errors and errors[0].startswith(field + ":"), errors


def test_load_names_file_and_problem(tmp_path):
    bad = tmp_path / "cpu.json"
    bad.write_text('{"schema": 1,')
    with pytest.raises(record.RecordError, match=r"cpu\.json: not valid JSON \(line 1"):
        record.load(bad)
    rec = make_record()
    rec["metrics"]["chain.eager.gbps"]["unit"] = 5
    bad.write_text(json.dumps(rec))
    with pytest.raises(record.RecordError, match=r"cpu\.json: metrics\.chain\.eager\.gbps\.unit: expected string"):
        record.load(bad)


def test_write_atomic_refuses_invalid_and_keeps_the_old_record(tmp_path):
    path = tmp_path / "demo" / "cpu.json"
    record.write(path, make_record())
    before = path.read_bytes()
    broken = make_record()
    broken["metrics"]["chain.eager.gbps"]["value"] = None
    with pytest.raises(record.RecordError):
        record.write(path, broken)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["cpu.json"]  # no temporary left behind


def _tiny_run(tmp_path, argv_extra=()):
    from demos.harness.run import Run

    demo_file = REPO / "demos" / "t3_compiler" / "kernel_fusion.py"  # stands in for a demo's own file
    return Run("kernel_fusion", "test", {"tiny": [1], "small": [2], "full": [3]}, demo_file,
               ["--device", "cpu", "--size", "tiny", "--results-dir", str(tmp_path), *argv_extra])


def test_a_run_writes_a_valid_record_with_provenance(tmp_path):
    import torch

    run = _tiny_run(tmp_path)
    assert run.sizes == [1]
    x = torch.randn(100)
    run.check_close("identity", x.clone(), x, rtol=0, atol=0)
    run.metric("copy.gbps", 1.0, "GB/s", ceiling="copy_bandwidth")
    path = run.save()
    rec = record.load(path)
    assert rec["device_class"] == "cpu" and rec["size"] == "tiny"
    assert set(rec["ceilings"]) == {"copy_bandwidth", "matmul_fp32", "matmul_bf16"}
    assert all(c["value"] > 0 for c in rec["ceilings"].values())
    assert rec["metrics"]["copy.gbps"]["fraction_of_ceiling"] == pytest.approx(1.0 / rec["ceilings"]["copy_bandwidth"]["value"])
    assert rec["provenance"]["packages"]["torch"].startswith("2.")
    # the digest the run stored is the one the catalog computes for this demo now: the record is fresh
    from records import catalog
    assert rec["source_digest"] == catalog.discover()["kernel_fusion"].digest("cpu")
    assert "demos/t3_compiler/kernel_fusion.py" in rec["source_files"]
    assert not any(f.startswith(("demos/harness/", "records/")) for f in rec["source_files"])  # infrastructure
    assert rec["inputs"] == {} and rec["settings"]["protocol_version"] >= 1


def test_a_failed_check_raises_and_leaves_the_previous_record(tmp_path):
    import torch

    old = make_record()
    path = tmp_path / "kernel_fusion" / "cpu.json"
    record.write(path, old)
    before = path.read_bytes()

    run = _tiny_run(tmp_path)
    with pytest.raises(AssertionError, match="wrong_kernel"):
        run.check_close("wrong_kernel", torch.ones(4), torch.zeros(4), rtol=1e-5, atol=1e-6)
    # the demo died here: save() never ran
    assert path.read_bytes() == before


def test_a_record_nested_too_deeply_is_one_line_not_a_traceback(tmp_path):
    from records import record

    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(record.RecordError, match="nested too deeply"):
        record.load(path)
