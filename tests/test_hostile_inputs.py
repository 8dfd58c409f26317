"""A contributed record or page cannot hurt a reader, and a malformed one is refused in one line.

Each test feeds what a careless or malicious contributor could commit (a record file, a page marker,
a demo option) and expects the check to refuse it with one line naming the file and the field, and
the renderer never to crash or to emit a payload unescaped. The property-based tests at the end let
hypothesis generate the malformed records.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from conftest import REPO, make_record, write_record
from records import record
from website import render

PAYLOAD = '<img src=x onerror="window.__pwned=1">'


def errors_of(site, capsys, rec=None, page=None) -> tuple[int, list[str]]:
    if rec is not None:
        write_record(site.results, rec)
    code, _ = site(page=page) if page else site()
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.startswith("error:")]


# -- device classes ----------------------------------------------------------------------------------
def test_a_device_class_carrying_html_is_refused(site, capsys):
    rec = make_record(device_class="h100", source_digest=site.digest)
    path = write_record(site.results, rec)
    path.rename(path.with_name(f"{PAYLOAD}.json"))
    code, errors = errors_of(site, capsys)
    assert code == 2 and any("the file name is not a device class" in e for e in errors), errors


def test_a_device_class_field_carrying_html_is_refused(site, capsys):
    rec = make_record(device_class="h100", source_digest=site.digest)
    rec["device_class"] = rec["provenance"]["device_class"] = PAYLOAD
    path = site.results / "kernel_fusion" / "h100.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
    code, errors = errors_of(site, capsys)
    assert code == 2 and any("device_class" in e for e in errors), errors


def test_an_undeclared_device_class_is_an_error_not_a_warning(site, capsys):
    code, errors = errors_of(site, capsys, make_record(device_class="h100-nvl-x", source_digest=site.digest))
    assert code == 1 and any("not declared in records/datasheets.toml" in e for e in errors), errors


def test_tab_labels_are_escaped():
    assert "<" not in render.tab_label(PAYLOAD) and '"' not in render.tab_label(PAYLOAD)


# -- plausibility ------------------------------------------------------------------------------------
def gpu_record(site, **metric) -> dict:
    rec = make_record(device_class="h100", source_digest=site.digest)
    rec["metrics"]["x"] = {"value": 1.0, "unit": "GB/s", **metric}
    return rec


@pytest.mark.parametrize("metric, expected", [
    ({"value": 1200.0, "unit": "TFLOP/s", "dtype": "bfloat16"}, "exceeds the H100 datasheet bfloat16 peak"),
    ({"value": 100.0, "unit": "TFLOP/s", "dtype": "float32"}, "exceeds the H100 datasheet float32 peak"),
    ({"value": 100.0, "unit": "TFLOP/s"}, "must say its precision"),
    ({"value": 100.0, "unit": "TFLOP/s", "dtype": "float9"}, "dtype"),
    ({"value": 4.0, "unit": "TB/s"}, "exceeds the H100 datasheet memory bandwidth"),
    # a host-to-device copy is bounded by the host link (PCIe Gen5 x16, 63 GB/s one way), not by HBM
    ({"value": 100.0, "unit": "GB/s", "kind": "host_link"}, "exceeds the H100 datasheet host link rate (one way) of 63"),
    ({"value": 10.0, "unit": "GB/s "}, "unknown unit 'GB/s '"),
    ({"value": -5.0, "unit": "GB/s"}, "cannot be negative"),
])
def test_rates_are_checked_against_the_peak_of_their_dtype_or_kind(site, capsys, metric, expected):
    code, errors = errors_of(site, capsys, gpu_record(site, **metric))
    assert code in (1, 2) and any(expected in e for e in errors), errors


def test_a_host_link_rate_under_the_link_rating_passes_and_a_link_between_gpus_is_not_held_to_it(site, capsys):
    for metric in ({"value": 55.0, "kind": "host_link"}, {"value": 400.0, "kind": "link"}):
        code, errors = errors_of(site, capsys, gpu_record(site, **metric))
        assert code == 0, (metric, errors)


def test_a_fraction_above_one_is_refused_unless_cache_resident(site, capsys):
    rec = gpu_record(site, value=3000.0, ceiling="copy_bandwidth", fraction_of_ceiling=150.0)
    code, errors = errors_of(site, capsys, rec)
    assert code == 1 and any("150x its same-run ceiling" in e for e in errors), errors
    rec["metrics"]["x"]["cache_resident"] = True
    code, errors = errors_of(site, capsys, rec)
    assert code == 0, errors


def test_a_fraction_just_above_one_is_published_and_named_as_an_under_reading_ceiling():
    """The first H200 window: a 4096^3 product ran 1.09x its run's 8192^3 bf16 ceiling. Within the margin it is
    published (a GPU record is rare), but the check names the ceiling as wrong instead of staying silent."""
    from records import plausibility
    rec = make_record(device_class="h200")
    rec["metrics"]["x"] = {"value": 21.8, "unit": "GB/s", "ceiling": "copy_bandwidth", "fraction_of_ceiling": 1.09}
    assert plausibility.vet(rec, "r") == []
    assert any("1.09x its same-run ceiling copy_bandwidth: that ceiling under-reads" in w
               for w in plausibility.above_ceiling(rec, "r"))
    rec["metrics"]["x"].update(value=19.0, fraction_of_ceiling=0.95)
    assert plausibility.above_ceiling(rec, "r") == []


def test_a_cpu_fraction_above_one_is_refused():
    """A CPU record is re-measured in a minute, so there a fraction above 1 (a wrong ceiling) is not published."""
    from records import plausibility
    rec = make_record()
    rec["metrics"]["x"] = {"value": 20.2, "unit": "GB/s", "ceiling": "copy_bandwidth", "fraction_of_ceiling": 1.01}
    assert any("metrics.x is 1.01x its same-run ceiling copy_bandwidth" in p for p in plausibility.vet(rec, "r"))
    assert plausibility.above_ceiling(rec, "r") == []
    rec["metrics"]["x"]["cache_resident"] = True
    assert plausibility.vet(rec, "r") == []


def test_a_stated_fraction_must_equal_value_over_ceiling(site, capsys):
    rec = gpu_record(site, value=10.0, ceiling="copy_bandwidth", fraction_of_ceiling=0.05)  # 10 / 20 is 0.5
    code, errors = errors_of(site, capsys, rec)
    assert code == 2 and any("fraction_of_ceiling: says 0.05 but value / ceiling is 0.5" in e for e in errors), errors


def test_a_failed_check_a_null_commit_and_no_checks_are_refused(site, capsys):
    rec = make_record(source_digest=site.digest)
    rec["checks"][0]["passed"] = False
    code, errors = errors_of(site, capsys, rec)
    assert code == 1 and any("correctness check 'chain.eager' failed" in e for e in errors), errors
    rec = make_record(source_digest=site.digest)
    rec["provenance"]["commit"] = None
    code, errors = errors_of(site, capsys, rec)
    assert code == 1 and any("provenance.commit is null" in e for e in errors), errors
    rec = make_record(source_digest=site.digest, checks=[])
    code, errors = errors_of(site, capsys, rec)
    assert code == 1 and any("no correctness check" in e for e in errors), errors


def test_a_fixture_cannot_be_published(site, capsys):
    code, errors = errors_of(site, capsys, make_record(source_digest=site.digest, fixture=True))
    assert code == 1 and any("test fixture" in e for e in errors), errors


# -- markers and pages ---------------------------------------------------------------------------------
def test_a_marker_naming_an_unknown_device_is_an_error(site, capsys):
    from conftest import TOPIC

    code, errors = errors_of(site, capsys, page=TOPIC.replace(
        "CLAIM", "{{ claim kernel_fusion @cpuu chain.compiled.speedup_largest >= 1.5 }}"))
    assert code == 1 and any("unknown device 'cpuu'" in e for e in errors), errors
    with pytest.raises(ValueError, match="unknown device 'cpuu'"):
        render.render_page("{{ metric kernel_fusion chain.eager.gbps @cpuu }}", "topics/x.md",
                           load=lambda demo: {"cpu": make_record()}, digests={"kernel_fusion": "sha256:" + "0" * 64})


@pytest.mark.parametrize("mutate, field", [
    (lambda r: r["metrics"]["chain.eager.gbps"].__setitem__("dtype", ["bfloat16"]), "metrics.chain.eager.gbps.dtype"),
    (lambda r: r["series"][0].__setitem__("hlines", "copy"), "series[0].hlines"),
    (lambda r: r["provenance"].__setitem__("commit", 12345), "provenance.commit"),
    (lambda r: r["tables"][0]["rows"].append(["only one cell"]), "tables[0].rows[2]"),
    (lambda r: r.__setitem__("unexpected", 1), "(top level)"),
])
def test_malformed_records_are_one_line_errors_naming_the_field(site, capsys, mutate, field):
    rec = make_record(source_digest=site.digest)
    mutate(rec)
    code, errors = errors_of(site, capsys, rec)
    assert code == 2 and len(errors) == 2, errors  # the record's one line, and "no CPU record" for the demo
    assert any(f"kernel_fusion/cpu.json: {field}" in e for e in errors), errors


def test_an_artifact_cannot_include_other_files():
    rec = make_record(artifacts={"graph": "line one\n--8<-- \"/etc/passwd\"\n;--8<--"})
    out = render.render_page("{{ artifact kernel_fusion graph @cpu }}", "topics/x.md", load=lambda demo: {"cpu": rec},
                             digests={"kernel_fusion": "sha256:" + "0" * 64})
    assert "--8<--" not in out and "passwd" in out


# -- demo options ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (["--sise", "tiny"], "unrecognized arguments: --sise"),
    (["--seed", "-1"], "--seed -1 is out of range"),
    (["--seed", str(2**40)], "is out of range"),
    (["--results-dir", "README.md"], "is a file, not a folder"),
    (["--device", "tpu"], "unknown device 'tpu'"),
])
def test_bad_demo_options_fail_up_front_in_one_line(args, expected):
    proc = subprocess.run([sys.executable, "-m", "demos.t3_compiler.kernel_fusion", "--device", "cpu", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-1000:]
    assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "measuring this machine's ceilings" not in proc.stdout  # refused before any work


# -- generated hostile records ---------------------------------------------------------------------------
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                      st.text(max_size=30), st.just(PAYLOAD), st.just("--8<-- /etc/passwd"))
JSON = st.recursive(JSON_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                    max_leaves=8)
FIELDS = [("demo",), ("device_class",), ("size",), ("metrics", "chain.eager.gbps"), ("metrics", "chain.eager.gbps", "unit"),
          ("metrics", "chain.eager.gbps", "value"), ("tables",), ("tables", 0, "rows"), ("series", 0, "lines"),
          ("checks", 0), ("not_run",), ("artifacts",), ("ceilings", "copy_bandwidth"), ("provenance",),
          ("provenance", "commit"), ("provenance", "utc"), ("title",), ("wall_time_s",)]


def put(rec, path, value):
    target = rec
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=JSON)
@example(field=("artifacts",), value={"\n": None})  # a key with a newline once made a two-line problem
@example(field=("metrics", "chain.eager.gbps"), value={"a b'\"": 1})
def test_any_malformed_record_is_refused_by_name_or_rendered_inertly(field, value):
    rec = make_record()
    put(rec, field, value)
    problems = record.validate(rec)
    if problems:  # refused: every problem names a field, on one line
        assert all(": " in p and "\n" not in p for p in problems), problems
        with pytest.raises(record.RecordError):
            record.parse(json.loads(json.dumps(rec, allow_nan=True)), "x.json")
        return
    # accepted: it renders without crashing, and no payload reaches the page unescaped
    page = render.render_page("{{ results kernel_fusion }}\n\n{{ metric kernel_fusion chain.eager.gbps @cpu }}",
                              "topics/x.md", load=lambda demo: {"cpu": record.Record(rec)},
                              digests={"kernel_fusion": "sha256:" + "0" * 64})
    # the renderer's own plots are raw HTML whose every value is escaped for an attribute; past them, no <img at all
    assert "<img" not in PLOT_TAG.sub("", page) and "--8<--" not in page


PLOT_TAG = re.compile(r'<picture><source media="[^"<>]*" srcset="[^"<>]*">'
                      r'<img src="[^"<>]*" alt="[^"<>]*" loading="lazy"></picture>')


@pytest.mark.slow
def test_a_payload_in_every_record_string_runs_no_script_in_chromium(chromium):
    """Put the payload in every string a record can carry, render it with the site's Markdown, and load
    the HTML in Chromium: the handler must never run."""
    from test_render import site_markdown

    rec = make_record(title=PAYLOAD)
    rec["tables"][0]["title"] = rec["tables"][0]["columns"][0] = rec["tables"][0]["rows"][0][0] = PAYLOAD
    rec["series"][0]["title"] = rec["checks"][0]["detail"] = rec["not_run"][0]["reason"] = PAYLOAD
    rec["metrics"]["chain.eager.gbps"]["label"] = rec["provenance"]["device_name"] = PAYLOAD
    rec["artifacts"] = {"graph": PAYLOAD + "\n```\n" + PAYLOAD}
    markdown = render.render_page("{{ results kernel_fusion }}\n\n{{ artifact kernel_fusion graph @cpu }}\n\n"
                                  "{{ metric kernel_fusion chain.eager.gbps @cpu }}", "topics/x.md",
                                  load=lambda demo: {"cpu": rec}, digests={"kernel_fusion": "sha256:" + "0" * 64})
    html = site_markdown(markdown)
    assert "<img src=x" not in html  # the payload only as escaped text (the plot's own <img> carries it in alt)
    page = chromium.new_page()
    try:
        page.set_content(f"<html><body>{html}</body></html>")
        page.wait_for_timeout(200)
        assert page.evaluate("window.__pwned === undefined")
        assert PAYLOAD in page.inner_text("body")  # shown as text, not run
    finally:
        page.close()
