"""The check command: freshness, claims, plausibility, page structure, malformed records."""

from __future__ import annotations

import time

import pytest

from conftest import TOPIC, make_record, write_record
from records import catalog
from scripts import check

def test_clean_site_passes(site, capsys):
    code, _ = site("{{ claim kernel_fusion @cpu chain.compiled.speedup_largest >= 1.5 }}")
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "1 claims; 0 errors" in out.out


def test_contradicted_claim_fails(site, capsys):
    code, _ = site("{{ claim kernel_fusion @cpu chain.compiled.speedup_largest >= 2 }}")
    assert code == 1
    assert "contradicted on CPU: 1.80 >= 2" in capsys.readouterr().err


def test_unmeasured_gpu_claim_does_not_fail(site, capsys):
    code, _ = site("{{ claim kernel_fusion @gpu chain.eager.gbps:fraction >= 0.8 }}")
    assert code == 0, capsys.readouterr().err


def test_unknown_metric_fails(site, capsys):
    code, _ = site("{{ metric kernel_fusion chain.nope @cpu }}")
    assert code == 1
    assert "has no metric 'chain.nope'" in capsys.readouterr().err


def test_stale_cpu_record_fails(site, capsys):
    write_record(site.results, make_record(source_digest="sha256:" + "f" * 64))
    code, _ = site()
    assert code == 1
    assert "cpu.json is stale" in capsys.readouterr().err


def test_stale_gpu_record_only_warns(site, capsys):
    write_record(site.results, make_record(device_class="h100", source_digest="sha256:" + "f" * 64))
    code, _ = site()
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "h100.json is stale" in out.out


def test_rate_above_datasheet_peak_fails(site, capsys):
    rec = make_record(device_class="h100", source_digest=site.digest)
    rec["metrics"]["chain.eager.gbps"] = {"value": 5000.0, "unit": "GB/s"}  # an H100 SXM moves 3,350 GB/s at most
    write_record(site.results, rec)
    code, _ = site()
    assert code == 1
    assert "exceeds the H100 datasheet memory bandwidth of 3,350" in capsys.readouterr().err


def test_malformed_record_exits_2_naming_file_and_field(site, capsys):
    rec = make_record(source_digest=site.digest)
    rec["metrics"]["chain.eager.gbps"]["value"] = "fast"
    write_record(site.results, rec)
    code, _ = site()
    assert code == 2
    assert "kernel_fusion/cpu.json: metrics.chain.eager.gbps.value: expected number" in capsys.readouterr().err


@pytest.mark.parametrize("section", check.REQUIRED_SECTIONS)
def test_topic_missing_a_section_fails(site, capsys, section):
    page = TOPIC.replace(f"## {section}\n", "")
    code, _ = site(page=page)
    assert code == 1
    assert f"missing section(s) ## {section}" in capsys.readouterr().err


def test_each_question_has_its_full_answer_collapsed_under_it(site, capsys):
    """Issue 32: per question, its 30-second answer and then its own full answer, collapsed."""
    code, _ = site(page=TOPIC.replace('??? abstract "Full answer"\n    Long answer.', "Long answer."))
    assert code == 1
    assert "'Why?' has no full answer under its 30-second answer" in capsys.readouterr().err


def test_a_heading_inside_a_full_answer_is_not_a_question(site, capsys):
    code, _ = site(page=TOPIC.replace("    Long answer.", "    ### What the numbers say\n\n    Long answer."))
    assert code == 0, capsys.readouterr().err


def test_nothing_but_the_answers_under_a_question(site, capsys):
    code, _ = site(page=TOPIC.replace("    Long answer.\n", "    Long answer.\n\nA stray paragraph.\n"))
    assert code == 1
    assert "under 'Why?', text after its full answer ('A stray paragraph.')" in capsys.readouterr().err


@pytest.mark.parametrize("old", ["Full answer", "30-second answer"])
def test_the_old_sections_are_refused(site, capsys, old):
    code, _ = site(page=TOPIC.replace("## Measured", f'## {old}\n??? abstract "Full model answer"\n    Long.\n\n## Measured'))
    assert code == 1
    assert f"'## {old}' is gone" in capsys.readouterr().err


def test_front_matter_is_required(site, capsys):
    code, _ = site(page=TOPIC.replace("difficulty: medium\n", "difficulty: brutal\n"))
    assert code == 1
    assert "difficulty is 'brutal'" in capsys.readouterr().err


def test_check_on_the_repository_is_fast(capsys):
    started = time.perf_counter()
    check.main([])
    assert time.perf_counter() - started < 30


def test_unknown_artifact_fails(site, capsys):
    code, _ = site("{{ artifact kernel_fusion no_such_dump @cpu }}")
    assert code == 1
    assert "has no artifact 'no_such_dump'" in capsys.readouterr().err


def test_question_needs_a_difficulty(site, capsys):
    code, _ = site(page=TOPIC.replace("- Why? (easy)", "- Why?"))
    assert code == 1
    assert "question without a difficulty: '- Why?'" in capsys.readouterr().err


def test_todo_markers_are_warnings(site, capsys):
    code, _ = site(page=TOPIC.replace("- Saying so.", "- TODO: a pitfall."))
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "t.md:" in out.out and "TODO left to write: - TODO: a pitfall." in out.out


def test_a_typed_measurement_warns_and_a_cited_figure_does_not(site, capsys):
    code, _ = site("Eager took 1049 us and compiled was 3.4x faster.")
    out = capsys.readouterr().out
    assert code == 0 and "typed number(s) 1049 us, 3.4x" in out
    code, _ = site("An H100 SXM moves 3.35 TB/s ([datasheet](https://www.nvidia.com/en-us/data-center/h100/)).")
    assert "typed number" not in capsys.readouterr().out


def test_a_demo_without_a_test_is_an_error(tmp_path):
    report = check.Report()
    module = ".".join(["demos", "t99_nothing", "lonely"])  # spelled apart: this file must not name it
    lonely = catalog.Demo("lonely", tmp_path / "lonely.py", module)
    check.check_tests(report, {"lonely": lonely, "kernel_fusion": catalog.discover()["kernel_fusion"]})
    assert len(report.errors) == 1 and "no test runs it" in report.errors[0] and "lonely" in report.errors[0]


def test_a_page_without_its_cheat_entry_or_pitfall_fails(site, capsys):
    """Issue 32 item 5: every topic has its cheat-sheet entry, with exactly one pitfall."""
    code, _ = site(page=TOPIC.replace("  - Pitfall: timing without a sync.\n", ""))
    assert code == 1 and "'cheat:' needs exactly one '- Pitfall: ...' line" in capsys.readouterr().err
    code, _ = site(page=TOPIC.replace("cheat: |\n  - Bytes over time.\n  - Pitfall: timing without a sync.\n", ""))
    assert code == 1 and "front matter lacks 'cheat:'" in capsys.readouterr().err


def test_an_answer_that_points_elsewhere_on_the_page_fails(site, capsys):
    """Issue 32 item 7: a 30-second answer or a follow-up is also a practice card, read alone."""
    code, _ = site(page=TOPIC.replace("### Why?\nBecause.", "### Why?\nBecause of the table above."))
    assert code == 1 and "points elsewhere on the page" in capsys.readouterr().err
