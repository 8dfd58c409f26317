"""Pages with and without a GPU record, driven by the GPU-shaped fixture (tests/fixtures/records; never
published): the tab with data comes first, GPU claims are judged on the GPU record, and before any GPU
record exists the sentences quoting GPU numbers wait, unseen, and the page names what is pending once."""

from __future__ import annotations

import json

from conftest import REPO, make_record
from records import record
from website import render

FIXTURE = REPO / "tests" / "fixtures" / "records" / "kernel_fusion" / "h100.json"
DIGEST = "sha256:" + "0" * 64
PAGE = """## Measured

{{ results kernel_fusion }}

## Claims

Control: {{ claim kernel_fusion @gpu bias_relu.best_fused.gbps:fraction >= 0.8 }}.
Value: {{ metric kernel_fusion bias_relu.best_fused.gbps @h100 }} and {{ metric kernel_fusion bias_relu.best_fused.gbps:fraction @h100 }}.
"""


def fixture() -> record.Record:
    return record.parse(json.loads(FIXTURE.read_text()), str(FIXTURE))


def cpu() -> record.Record:
    rec = make_record()
    rec["metrics"]["bias_relu.best_fused.gbps"] = {"value": 10.0, "unit": "GB/s", "ceiling": "copy_bandwidth",
                                                   "fraction_of_ceiling": 0.5}
    return rec


def page(records: dict) -> str:
    return render.render_page(PAGE, "topics/x.md", load=lambda demo: records, digests={"kernel_fusion": DIGEST})


def test_with_a_gpu_record_its_tab_comes_first_and_gpu_claims_are_judged():
    gpu = fixture()
    assert gpu.is_fixture and gpu.device_class == "h100"
    out = page({"h100": gpu, "cpu": cpu()})
    assert out.index('=== "H100"') < out.index('=== "CPU"') and '=== "GPU"' not in out
    assert "FIXTURE \\(not a measurement\\)" in out  # the provenance line says what it is
    fraction = gpu.metrics["bias_relu.best_fused.gbps"].fraction_of_ceiling
    assert fraction >= 0.8  # the fixture's claim holds: a contradicted one fails the build (test_render)
    assert 'title="Checked against the record (H100: ' in out and "not yet measured on GPU" not in out
    assert "not yet measured on H100" not in out and "(H100)" in out  # the metric has its value


def test_without_a_gpu_record_only_the_cpu_tab_and_one_line_naming_what_is_pending():
    out = page({"cpu": cpu()})
    assert '=== "CPU"' in out and '=== "GPU"' not in out  # no empty GPU tab
    assert "not yet measured" not in out and "–" not in out and "Control:" not in out and "Value:" not in out
    note = [line for line in out.splitlines() if "mm-pending-note" in line]
    assert len(note) == 1 and "3 numbers of the kernel fusion demo" in note[0]  # one claim and two H100 values


def test_a_number_from_a_stale_gpu_record_carries_its_date():
    """A GPU record kept from before a code change (a GPU window is rare) still shows its numbers, each dated, so
    a sentence quoting it does not read as current; a fresh record's numbers carry the device alone."""
    records = {"h100": fixture(), "cpu": cpu()}
    fresh = page(records)
    stale = render.render_page(PAGE, "topics/x.md", load=lambda demo: records,
                               digests={"kernel_fusion": "sha256:" + "1" * 64}).replace("\\-", "-")  # Markdown escapes
    assert "(H100)</span>" in fresh and "(H100, 2026-11-23)" not in fresh
    assert "(H100, 2026-11-23)</span>" in stale and "(H100)</span>" not in stale
