"""Records become Markdown: tables, badges, plots, metrics, claim verdicts, and nothing injectable."""

from __future__ import annotations

import re

from html import unescape
from html.parser import HTMLParser

import markdown
import pytest

from conftest import REPO, make_record
from website import render, search
from website.site_pages import mkdocs_config
from website.markers import find, parse

DIGEST = "sha256:" + "0" * 64
OTHER_DIGEST = "sha256:" + "1" * 64


def site_markdown(text: str) -> str:
    """Convert with exactly the Markdown extensions the site uses (read from mkdocs.yml)."""
    config = mkdocs_config(REPO / "mkdocs.yml")
    names, configs = [], {}
    for ext in config["markdown_extensions"]:
        if isinstance(ext, dict):
            (name, options), = ext.items()
            names.append(name)
            configs[name] = options or {}
        else:
            names.append(ext)
    return markdown.markdown(text, extensions=names, extension_configs=configs)


def page(text: str, records: dict, digest: str = DIGEST, lost: list | None = None) -> str:
    return render.render_page(text, "topics/x.md", load=lambda demo: records, digests={"kernel_fusion": digest},
                              lost=lost)


def test_results_block_has_tabs_table_plot_and_fresh_badge():
    out = page("{{ results kernel_fusion }}", {"cpu": make_record()})
    html = site_markdown(out)
    assert '=== "CPU"' in out and '=== "GPU"' not in out  # no empty GPU tab: the page names what is pending once
    assert "<table>" in html and "<td>compiled</td>" in html
    assert 'src="../../assets/plots/kernel_fusion/cpu-chain.svg"' in html  # served at topics/x/: raw HTML, not rewritten
    assert 'srcset="../../assets/plots/kernel_fusion/cpu-chain.phone.svg"' in html
    assert "mm-fresh" in html and "1 of 1 correctness check passed" in html
    assert "triton (timing)" in html and "Test CPU" in html


def test_a_long_check_list_shows_failures_first_and_links_the_record_for_the_rest():
    rec = make_record()
    rec["checks"] = [{"name": f"ok{i}", "passed": True, "detail": "fine"} for i in range(30)]
    html = site_markdown(page("{{ results kernel_fusion }}", {"cpu": rec}))
    assert "30 of 30 correctness checks passed" in html
    assert "ok19:" in html and "ok20:" not in html
    assert "10 more passed checks" in html and 'href="../results/kernel_fusion/cpu.json"' in html
    rec["checks"][25]["passed"] = False
    html = site_markdown(page("{{ results kernel_fusion }}", {"cpu": rec}))
    assert "29 of 30 correctness checks passed" in html and "ok25:" in html  # a failure is never hidden


def test_stale_badge_when_the_demo_changed():
    html = site_markdown(page("{{ results kernel_fusion }}", {"cpu": make_record()}, digest=OTHER_DIGEST))
    assert "demo changed since this was measured" in html and "mm-fresh" not in html


def test_gpu_record_gets_its_own_tab_and_datasheet_fraction():
    gpu = make_record(device_class="h100")
    gpu["ceilings"]["copy_bandwidth"]["value"] = 3000.0
    out = page("{{ results kernel_fusion }}", {"h100": gpu, "cpu": make_record()})
    assert out.index('=== "H100"') < out.index('=== "CPU"')
    assert '=== "GPU"' not in out
    assert "89.6% of the 3,350 datasheet peak" in out  # 3000 / 3350: a difference from 90% stays visible


def test_metric_marker_inserts_value_unit_and_device():
    records = {"cpu": make_record()}
    assert "1.80x (CPU)" in page("{{ metric kernel_fusion chain.compiled.speedup_largest @cpu }}", records)
    assert "50% (CPU)" in page("{{ metric kernel_fusion chain.eager.gbps:fraction @cpu }}", records)
    assert "10.0 GB/s (CPU)" in page("{{ metric kernel_fusion chain.eager.gbps @cpu }}", records)

def test_a_gpu_number_without_a_record_takes_its_sentence_and_the_page_names_it_once():
    """Before a GPU record exists: no dash, no pill, no empty tab; the sentence (list item, table row) quoting the
    GPU number is left out, and one line under '## Measured' names what is pending (no command: that is the
    contributing page's)."""
    records = {"cpu": make_record()}
    text = ("## Measured\n\nOn the CPU: {{ metric kernel_fusion chain.eager.gbps @cpu }}. On a GPU: "
            "{{ metric kernel_fusion chain.eager.gbps @gpu }}. Claim: {{ claim kernel_fusion @gpu chain.eager.gbps:fraction"
            " >= 0.8 }}. Then more\nprose, wrapped.\n\nFractions of copy on a GPU:\n\n"
            "- control: {{ metric kernel_fusion chain.eager.gbps:fraction @gpu }}.\n"
            "- other: {{ metric kernel_fusion chain.eager.gbps:fraction @h200 }}.\n\n"
            "| a | b |\n|---|---|\n| cpu | {{ metric kernel_fusion chain.eager.gbps @cpu }} |\n"
            "| gpu | {{ metric kernel_fusion chain.eager.gbps @h100 }} |\n\n"
            "    {{ artifact kernel_fusion graph @gpu }}\n\n## Next\n")
    lost = []
    out = page(text, records, lost=lost)
    assert "\ue000" not in out and "–" not in out and "not yet measured" not in out and lost == []
    assert "10.0 GB/s (CPU)" in out and "On a GPU" not in out and "Claim:" not in out
    assert "Then more prose, wrapped." in out and "Fractions of copy" not in out and "- control" not in out
    assert "| cpu |" in out and "| gpu |" not in out
    note = [line for line in out.splitlines() if "mm-pending-note" in line]
    assert len(note) == 1 and "Still to measure on a GPU: 6 numbers of the kernel fusion demo." in note[0], note
    assert "scripts.regen" not in note[0]
    lead = page("*On a GPU.* It is {{ metric kernel_fusion chain.eager.gbps @gpu }}.\n\nNext.", records)
    assert lead.strip() == "Next."  # an emphasised lead-in left alone goes with what it led
    mixed = page("## Measured\n\nCPU {{ metric kernel_fusion chain.eager.gbps @cpu }} and GPU "
                 "{{ metric kernel_fusion chain.eager.gbps @gpu }}.\n", records, lost=lost)
    assert "GPU" not in mixed.split("</p>")[-1] and len(lost) == 1  # the test of the real pages refuses this


def test_a_gpu_metric_shows_whichever_gpu_has_a_record_newest_first():
    old, new = make_record(device_class="h100"), make_record(device_class="h200")
    old["provenance"]["utc"], new["provenance"]["utc"] = "2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z"
    out = page("## Measured\n\n{{ metric kernel_fusion chain.eager.gbps @gpu }}\n\n{{ results kernel_fusion }}",
               {"cpu": make_record(), "h100": old, "h200": new})
    assert "10.0 GB/s (H200)" in out and "mm-pending-note" not in out
    assert out.index('=== "H200"') < out.index('=== "H100"') < out.index('=== "CPU"')
    only_h100 = page("{{ metric kernel_fusion chain.eager.gbps @gpu }}", {"cpu": make_record(), "h100": old})
    assert "10.0 GB/s (H100)" in only_h100


def test_claim_verdicts():
    records = {"cpu": make_record()}
    holds = unescape(page("Compiled is 1.5x eager{{ claim kernel_fusion @cpu chain.compiled.speedup_largest >= 1.5 }}.",
                          records))
    assert holds.startswith('Compiled is 1.5x eager<span class="mm-check"') and ">✓</span>." in holds
    assert "(CPU: 1.80 >= 1.50)" in holds  # the comparison checked: in the mark's tooltip, not in the reader's text
    assert "speedup_largest" not in re.sub(r'(data-claim|title)="[^"]*"', "", holds)
    with pytest.raises(render.ContradictedClaim, match=r"contradicted by the cpu record \(1.80 >= 2.00\)"):
        page("{{ claim kernel_fusion @cpu chain.compiled.speedup_largest >= 2 }}", records)
    unmeasured = page("Before. Claim {{ claim kernel_fusion @gpu chain.eager.gbps:fraction >= 0.8 }}. After.", records)
    assert unmeasured == "Before. After."  # no GPU record yet: the claim waits for one, unseen
    with pytest.raises(render.ContradictedClaim):
        page("{{ claim kernel_fusion @cpu chain.eager.gbps < 0.6 * chain.eager.gbps }}", records)


def test_markers_inside_code_are_left_alone():
    text = "Write `{{ metric kernel_fusion x @cpu }}`.\n\n```\n{{ results kernel_fusion }}\n```\n"
    assert find(text) == []
    assert page(text, {"cpu": make_record()}) == text


def test_claim_parsing():
    m = parse("claim", " kernel_fusion @gpu a.b-c:fraction >= 0.8 ", "x")
    assert (m.device, str(m.lhs), m.op, m.rhs) == ("gpu", "a.b-c:fraction", ">=", 0.8)


INJECTIONS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
    "![x](javascript:alert(1))",
    '"><svg onload=alert(1)>',
    "{: onclick=alert(1) }",
    "`code` *bold* | pipe",
]


class ElementCollector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))


def test_record_strings_cannot_inject_html_or_script():
    rec = make_record()
    for i, bad in enumerate(INJECTIONS):
        rec["tables"][0]["rows"].append([bad, bad])
        rec["checks"].append({"name": bad, "passed": True, "detail": bad})
        rec["not_run"].append({"variant": bad, "reason": bad})
        rec["metrics"][f"m{i}"] = {"value": 1.0, "unit": bad}
    rec["tables"][0]["title"] = INJECTIONS[0]
    rec["series"][0]["title"] = INJECTIONS[3]
    rec["provenance"].update(device_name=INJECTIONS[1], utc=INJECTIONS[2], python=INJECTIONS[4],
                             packages={"torch": INJECTIONS[0]}, commit=INJECTIONS[2])
    text = "{{ results kernel_fusion }}\n\n" + " ".join(
        f"{{{{ metric kernel_fusion m{i} @cpu }}}}" for i in range(len(INJECTIONS)))
    html = site_markdown(page(text, {"cpu": rec}))

    parser = ElementCollector()
    parser.feed(html)
    tags = {tag for tag, _ in parser.elements}
    assert not tags & {"script", "svg", "iframe", "object", "embed"}, tags
    for tag, attrs in parser.elements:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        for name in ("href", "src"):
            assert not (attrs.get(name) or "").strip().lower().startswith("javascript"), (tag, attrs)
        if tag == "img":
            assert attrs["src"] == "../../assets/plots/kernel_fusion/cpu-chain.svg"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown as text, harmlessly


def test_plot_files_are_svg_drawn_once_and_redrawn_when_the_data_changes(tmp_path, monkeypatch):
    from website import plots

    monkeypatch.setattr(plots, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(plots.os, "cpu_count", lambda: 1)  # drawn here, where the test sees it
    drawn = []
    real = plots.series_svg
    monkeypatch.setattr(plots, "series_svg",
                        lambda s, label, phone=False: drawn.append((s["name"], phone)) or real(s, label, phone))
    rec = make_record()
    files = render.plot_files({"kernel_fusion": {"cpu": rec}})
    assert [p for p, _ in files] == ["assets/plots/kernel_fusion/cpu-chain.svg", "assets/plots/kernel_fusion/cpu-chain.phone.svg"]
    assert files[0][1].lstrip().startswith("<?xml") and "<svg" in files[0][1] and files[1][1] != files[0][1]
    both = [("chain", False), ("chain", True)]
    assert render.plot_files({"kernel_fusion": {"cpu": rec}}) == files and drawn == both  # cached
    rec["series"][0]["lines"][0]["y"] = [6.0, 11.0]
    changed = render.plot_files({"kernel_fusion": {"cpu": rec}})
    assert drawn == both + both and changed[0][1] != files[0][1]


def test_artifact_marker_shows_the_text_in_a_fence_it_cannot_escape():
    rec = make_record()
    rec["artifacts"]["graph"] = "x = add(a, b)\n```\n<script>alert(1)</script>\n```"
    html = site_markdown(page("{{ artifact kernel_fusion graph @cpu }}", {"cpu": rec}))
    assert "<script" not in html and "&lt;script&gt;" in html
    assert "x = add(a, b)" in html and "<details" in html
    missing = page("{{ artifact kernel_fusion graph @h100 }}", {"cpu": rec})
    assert missing == ""  # no H100 record yet: the artifact waits for one, unseen


def test_counts_render_as_whole_numbers():
    rec = make_record()
    rec["metrics"]["graphs"] = {"value": 2.0, "unit": "compiles"}
    assert "2 compiles (CPU)" in page("{{ metric kernel_fusion graphs @cpu }}", {"cpu": rec})


def test_a_long_table_is_summarised_with_the_full_table_folded_and_units_kept():
    """Issue 16 item 1: more than LONG_TABLE_ROWS rows show the first and last rows and a row counting
    the rest; the full table follows in a collapsible block; headers keep their units."""
    rec = make_record()
    rows = [[f"v{i}", float(i)] for i in range(30)]
    rec["tables"] = [{"name": "long", "title": "a long sweep", "columns": ["variant", "time (ms)"], "rows": rows}]
    rec["series"] = []  # a run without a plot: its first table is the evidence shown
    html = site_markdown(page("{{ results kernel_fusion }}", {"cpu": rec}))
    summary, folded = html.split("<details", 1)[0], html.split("Full table: a long sweep (30 rows)", 1)
    assert len(folded) == 2, "the full table is folded under its own summary line"
    assert "<th>time (ms)</th>" in summary and "<td>v0</td>" in summary and "<td>v29</td>" in summary
    assert "<td>v10</td>" not in summary and "23 more rows" in summary
    assert all(f"<td>v{i}</td>" in folded[1] for i in range(30))
    short = make_record(series=[])
    html = site_markdown(page("{{ results kernel_fusion }}", {"cpu": short}))
    assert "Full table" not in html and "<td>compiled</td>" in html  # a short table is shown whole


def test_search_exclusions_wrap_measured_blocks_without_nesting_the_same_tag():
    """The theme's search parser compares elements by tag, so an excluded <div> would be re-included
    at its first nested </div>: measured blocks are wrapped, and the parser then skips all of them."""
    from material.plugins.search.plugin import Parser

    out = page("## Questions\n\nWhy? (easy)\n\n## Measured\n\n{{ results kernel_fusion }}\n\n### A demo\n\n"
               "Prose about it.\n\n## Further reading\n\n- A paper.\n", {"cpu": make_record()})
    html = search.exclude_measured_from_search(site_markdown(out))
    parser = Parser()
    parser.feed(html)
    parser.close()
    text = " ".join("".join(s.text) for s in parser.data)
    titles = [s.id for s in parser.data]
    assert "Why?" in text and "a-demo" in titles  # questions and the demo's heading stay searchable
    assert "Measured on" not in text and "compiled" not in text and "Prose about it" not in text
    assert "A paper" not in text


def test_plot_titles_say_measured_where_and_projections_say_model():
    from website.plots import plain_number, plot_title

    assert plot_title({"title": "bias + GELU: effective bandwidth"}, "CPU") == "bias + GELU: effective bandwidth (CPU, measured)"
    projected = plot_title({"title": "70B: where a step's time goes", "computed": True}, "CPU")
    assert "CPU" not in projected and "computed, not measured" in projected
    assert [plain_number(v) for v in (1, 30, 300, 2000, 0.01, 0.5)] == ["1", "30", "300", "2,000", "0.01", "0.5"]
    assert [plain_number(v) for v in (1024, 16384, 262144, 1234.5)] == ["1,024", "16,384", "262,144", "1,230"]


def test_a_stepped_pipeline_timeline_is_drawn_as_a_gantt_chart():
    from website.plots import gantt_lanes, series_svg

    series = {"name": "timeline", "title": "GPipe timeline: low = forward, high = backward, flat = idle",
              "x_label": "time (ms)", "y_label": "stage", "kind": "steps", "lines": [
                  {"label": "stage 0", "x": [0, 1, 1, 2, 2, 3, 3], "y": [0.4, 0.4, 0.0, 0.0, 0.8, 0.8, 0.0]},
                  {"label": "stage 1", "x": [0, 1, 1, 2, 2, 3], "y": [1.0, 1.0, 1.4, 1.4, 1.8, 1.8]}]}
    lanes = gantt_lanes(series)
    assert [label for label, _ in lanes] == ["stage 0", "stage 1"]
    assert [(a, b, p) for a, b, p, _ in lanes[0][1]] == [(0, 1, "forward"), (2, 3, "backward")]
    assert [(a, b, p) for a, b, p, _ in lanes[1][1]] == [(1, 2, "forward"), (2, 3, "backward")]
    svg = series_svg(series, "CPU")
    assert "forward" in svg and "backward" in svg and ">0.4<" not in svg
    explicit = {**series, "kind": "gantt", "y_label": "", "lines": [
        {"label": "stage 0 forward", "x": [0, 1, 2, 3], "y": [0, 0, 1, 1]},
        {"label": "stage 0 backward", "x": [4, 5], "y": [0, 0]}]}
    (lane, bars), = gantt_lanes(explicit)
    assert lane == "stage 0" and [(a, b, p, t) for a, b, p, t in bars] == [
        (0, 1, "forward", "0"), (2, 3, "forward", "1"), (4, 5, "backward", "0")]


def test_noisy_points_are_circled_and_named_in_the_legend():
    """Issue 32: a point whose samples scattered (p90 above NOISY_SPREAD x p10) gets a ring and a legend entry;
    a plot without such a point draws neither."""
    from website.plots import NOISY_SPREAD, noisy_points, series_svg

    line = {"label": "fused", "x": [1.0, 2.0, 4.0], "y": [3.0, None, 5.0], "spread": [1.1, 3.0, NOISY_SPREAD + 0.2]}
    series = {"name": "s", "title": "t", "x_label": "n", "y_label": "ms", "lines": [line]}
    assert noisy_points(series) == [(4.0, 5.0, NOISY_SPREAD + 0.2)]  # a missing y is never flagged
    assert "noisy: p90 above" in series_svg(series, "CPU") and "noisy: p90 above" in series_svg(series, "CPU", True)
    quiet = {**series, "lines": [{**line, "spread": [1.1, None, 1.2]}]}
    plain = {**series, "lines": [{k: v for k, v in line.items() if k != "spread"}]}
    assert not noisy_points(quiet) and "noisy" not in series_svg(quiet, "CPU") and "noisy" not in series_svg(plain, "CPU")


def test_a_series_line_takes_timings_as_its_spreads():
    from demos.harness.run import _line

    class T:
        spread = 1.7

    assert _line("a", [1, 2], [3, 4], [T(), None])["spread"] == [1.7, None]
    assert "spread" not in _line("a", [1], [3])
    for bad in ([1.2], [0.5, 1.0]):  # one per point, never below 1
        with pytest.raises(ValueError, match="one spread"):
            _line("a", [1, 2], [3, 4], bad)


def test_a_run_with_many_tables_and_plots_shows_the_first_and_folds_the_rest():
    """Issue 32: one piece of evidence per device tab (the first plot, else the first table), a provenance chip, and
    one fold with everything else of the run; nothing is dropped."""
    rec = make_record()
    rec["tables"] = [{"name": f"t{i}", "title": f"table {i}", "columns": ["a (ms)"], "rows": [[i]]} for i in range(4)]
    rec["series"] = [{**make_record()["series"][0], "name": f"s{i}", "title": f"plot {i}"} for i in range(3)]
    html = site_markdown(page("{{ results kernel_fusion }}", {"cpu": rec}))
    shown, folded = html.split("This run: provenance, ceilings, 4 more tables, 2 more plots, 1 correctness check", 1)
    assert "plot 0" in shown and "table 0" not in shown and "plot 1" not in shown and "mm-prov" in shown
    assert all(f"table {i}" in folded for i in range(4)) and "plot 1" in folded and "plot 2" in folded
    assert "Ceilings measured in the same run" in folded and "<details" in shown[-300:]
    tables_only = make_record(series=[])
    html = site_markdown(page("{{ results kernel_fusion }}", {"cpu": tables_only}))
    assert html.index("<table>") < html.index("mm-prov") < html.index("<details")


def test_table_cells_keep_a_demos_rounding_and_shorten_unrounded_floats():
    assert [render._cell(v) for v in (1.5, 0.125, 26.308792114257812, 0.9025131581881843, 1234.5, 3, None)] == [
        "1.5", "0.125", "26.31", "0.9025", "1,234", "3", "n/a"]


def test_on_the_real_pages_a_gpu_number_has_its_sentence_to_itself():
    """A sentence that quotes a GPU number with no record yet is left out until one exists, so it must not also
    carry a CPU number or verdict (it would vanish with it): write the GPU number in a sentence of its own."""
    for path in sorted((REPO / "docs" / "topics").glob("*.md")):
        lost: list[str] = []
        out = render.render_page(path.read_text(encoding="utf-8"), f"topics/{path.name}", lost=lost)
        assert not lost, f"{path.name}: {lost[0][:300]}"
        assert "\ue000" not in out


def test_a_record_says_what_the_stability_guard_saw():
    stability = {"rule": "...", "measurements": 12, "remeasured": 2, "unstable": 0, "samples": 400,
                 "preempted_samples": 7, "load_1min": [0.3, 0.9], "cpu_count": 2,
                 "timings": [{"where": "x.py:1", "spread": 1.4}, {"where": "x.py:2", "spread": 1.9}]}
    html = site_markdown(page("{{ results kernel_fusion }}", {"cpu": make_record(stability=stability)}))
    assert "Timing stability: 12 measurements, all stable, 7 of 400 samples preempted and left out" in html
    assert "2 measured again" in html and "1.9x" in html
    assert "Timing stability" not in site_markdown(page("{{ results kernel_fusion }}", {"cpu": make_record()}))


def test_a_block_marker_inside_a_fold_renders_inside_it():
    """Issue 32: a demo's methodology folds away with its artifacts and results; a block marker on an indented line
    keeps its whole output at that indentation, so it stays inside the fold."""
    rec = make_record(artifacts={"graph": "x = f(y)"})
    out = page('??? note "How this was measured"\n\n    Prose.\n\n    {{ artifact kernel_fusion graph @cpu }}\n\n'
               '    {{ results kernel_fusion }}\n\nAfter.\n', {"cpu": rec})
    body = out.split("\nAfter.")[0].split("\n")[1:]
    assert all(not line or line.startswith("    ") for line in body), [l for l in body if l and l[0] != " "][:3]
    html = site_markdown(out)
    assert html.index("x = f(y)") < html.index("<table>") < html.rindex("</details>") < html.index("<p>After.</p>")


def test_only_a_measured_value_carries_its_device():
    """Issue 32 item 3: a value computed from a formula, read from a datasheet or found by static analysis says so,
    never "(CPU)"; the kind is the record's (the metric's origin), not words in a label."""
    rec = make_record()
    rec["metrics"]["ridge"] = {"value": 295.0, "unit": "FLOP/byte", "origin": "datasheet"}
    rec["metrics"]["step"] = {"value": 4.922, "unit": "s", "origin": "computed"}
    rec["metrics"]["regs"] = {"value": 0.75, "unit": "fraction", "origin": "static"}
    out = page("{{ metric kernel_fusion ridge @cpu }}; {{ metric kernel_fusion step @cpu }}; "
               "{{ metric kernel_fusion regs @cpu }}; {{ metric kernel_fusion chain.eager.gbps @cpu }}", {"cpu": rec})
    assert "295 FLOP/byte (datasheet)" in out and "4.92 s (computed)" in out and "75% (static analysis)" in out
    assert "10.0 GB/s (CPU)" in out and out.count("(CPU)") == 1 and 'data-origin="datasheet"' in out
    old_gpu = make_record(device_class="h200")  # made before metrics said their origin: its CPU record's applies
    old_gpu["metrics"]["ridge"] = {"value": 295.0, "unit": "FLOP/byte"}
    out = page("{{ metric kernel_fusion ridge @gpu }}; {{ metric kernel_fusion chain.eager.gbps @gpu }}",
               {"cpu": rec, "h200": old_gpu})
    assert "295 FLOP/byte (datasheet)" in out and "10.0 GB/s (H200)" in out


def test_numbers_read_as_numbers():
    """Issue 32 review: a unit that only names the kind of a number is not printed ('0.0137 mse', '3 value'); a large
    ratio has no false precision ('6506.22x'); a check mark over values not measured in the run says what they are."""
    assert render.fmt_value(0.0137, "mse") == "0.0137" and render.fmt_value(3, "value") == "3"
    assert render.fmt_value(6506.22, "x") == "6,506x" and render.fmt_value(2.5, "x") == "2.50x"
    rec = make_record()
    rec["metrics"]["proj"] = {"value": 28.7, "unit": "s", "origin": "computed"}
    out = page("It is long{{ claim kernel_fusion @cpu proj > 5 }}.", {"cpu": rec})
    assert "(computed: 28.7 &gt; 5.00)" in out and "CPU:" not in out


def test_a_cell_that_is_a_link_to_an_https_page_shows_as_that_link_and_nothing_else_does():
    assert render._cell("[H100](https://www.nvidia.com/en-us/data-center/h100/)") == (
        "[H100](https://www.nvidia.com/en-us/data-center/h100/)")
    for hostile in ("[x](javascript:alert(1))", "[x](http://example.com/)", '[x](https://a.b/" onclick="y)',
                    "[x](https://a.b/)(more)"):
        assert render._cell(hostile).startswith("\\[x\\]\\("), hostile  # escaped: no link
    assert render._cell("[<img src=x onerror=y>](https://a.b/)") == "[&lt;img src=x onerror=y&gt;](https://a.b/)"


def test_a_tiny_size_is_written_in_a_unit_that_reads():
    assert render.fmt_value(3.814697265625e-06, "MiB") == "4 B"
    assert render.fmt_value(0.00048828125, "MiB") == "512 B"
    assert render.fmt_value(0.005, "GB") == "5.00 MB"
    assert render.fmt_value(0.5, "MiB") == "0.500 MiB"
