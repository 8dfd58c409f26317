"""The GPU set (records/gpu_set.toml): every demo declared once with its reason, the headline demos in it, and a
CPU-only demo never quoted on a GPU by a page (the check refuses the marker)."""

from __future__ import annotations

from records import catalog, gpu_set
from scripts import check


def test_every_demo_is_declared_once_with_a_reason():
    declared = gpu_set.declared()
    assert declared.problems(catalog.discover()) == []
    assert 15 <= len(declared.gpu) <= 25, "the GPU set must fit two windows"
    assert set(declared.headline) <= set(declared.gpu) and len(set(declared.headline)) == len(declared.headline)


def test_the_declaration_names_what_is_wrong(tmp_path):
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "gpu_set.toml").write_text(
        'headline = ["a", "c"]\n[gpu]\na = "why"\nb = ""\n[cpu_only]\na = "both"\nz = "no such demo"\n')
    problems = gpu_set.load(tmp_path).problems(["a", "b", "c"])
    assert "a: in both [gpu] and [cpu_only]" in problems and "z: no such demo" in problems
    assert any(p.startswith("c: declared in neither") for p in problems)
    assert "headline c: not in [gpu]" in problems and "b: give the reason" in problems


def test_a_page_quoting_a_cpu_only_demo_on_a_gpu_is_refused(tmp_path):
    demos = catalog.discover()
    records = {name: catalog.load_records(name) for name in ("gbdt", "kernel_fusion")}
    page = tmp_path / "page.md"
    page.write_text("A: {{ metric gbdt sklearn.fit_s @h100 }}. B: {{ claim gbdt @gpu sklearn.fit_s > 1 }}.\n"
                    "C: {{ claim kernel_fusion @gpu bias_relu.best_fused.gbps:fraction >= 0.8 }}.\n")
    report = check.Report()
    check.check_pages(report, demos, records, tmp_path)
    cpu_only = [e for e in report.errors if "gbdt is CPU-only by declaration" in e]
    assert len(cpu_only) == 2 and not any("kernel_fusion" in e for e in report.errors), report.errors
