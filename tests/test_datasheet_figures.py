"""One source per chip figure: records/datasheets.toml. The cluster cost model reads its defaults from it, the
site computes ridge points through records.datasheets.ridge_point, and the JavaScript calculators read the
figures from assets/datasheets.js, which the build generates from the same file: none of them types one."""

from __future__ import annotations

import json
import re

import pytest

from demos.common import cluster_model, cluster_validation
from records import datasheets
from records.paths import REPO_ROOT
from website import site_pages, sizing

CALCULATORS = [REPO_ROOT / "docs" / "assets" / name for name in ("parallel-calculator.js", "sizing-calculators.js")]
MARKUP = [REPO_ROOT / "docs" / "includes" / "parallel-calculator.html", REPO_ROOT / "docs" / "calculators.md"]


def chip_figures() -> set[float]:
    """Every bandwidth and peak of a GPU entry (100 and up: smaller numbers are too common to mean a chip), and
    the rounded or both-direction forms they are quoted in."""
    figures = {989.0, 900.0, 600.0, 3.35, 4.8}
    for sheet in datasheets.load().values():
        if sheet.get("kind") == "cpu":
            continue
        values = [sheet.get(f) for f in ("memory_gbps", "nvlink_gbps", "host_link_gbps")]
        values += [*sheet.get("tflops", {}).values(), *sheet.get("tops", {}).values()]
        figures |= {float(v) for v in values if v is not None and v >= 100}
    return figures


def numbers(text: str) -> set[float]:
    return {float(m) for m in re.findall(r"(?<![\w.#-])\d+(?:\.\d+)?(?![\w.])", text)}


@pytest.mark.parametrize("path", CALCULATORS + MARKUP, ids=lambda p: p.name)
def test_no_chip_figure_is_typed_in_the_calculators(path):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":  # the calculators' markup, not the page's prose (which cites the datasheets)
        text = "\n".join(re.findall(r'<div id="[a-z]+-calculator".*?\n</div>', text, re.S))
    text = re.sub(r"<style>.*?</style>", "", text, flags=re.S)  # CSS (font weights) is no figure
    typed = numbers(text) & chip_figures()
    assert not typed, f"{path.name} types chip figures {sorted(typed)}: read them from window.MM_DATASHEETS"


def test_the_generated_datasheets_script_is_the_datasheet_file():
    text = site_pages.datasheets_js()
    body = text[text.index(site_pages.DATASHEETS_GLOBAL) + len(site_pages.DATASHEETS_GLOBAL):].rstrip()
    assert body.endswith(";")
    assert json.loads(body[:-1]) == datasheets.load()


def test_the_site_loads_the_datasheets_before_the_calculators():
    text = (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    block = re.search(r"^extra_javascript:\n((?:[ \t]+- .*\n)+)", text, re.M).group(1)
    scripts = [line.split("- ", 1)[1].split("#")[0].strip() for line in block.splitlines()]
    first = scripts.index(site_pages.DATASHEETS_JS)
    assert all(first < scripts.index(f"assets/{p.name}") for p in CALCULATORS)
    assert not (REPO_ROOT / "docs" / site_pages.DATASHEETS_JS).exists()  # generated, never committed


def test_the_cluster_model_reads_its_hardware_from_the_datasheets():
    h100, a100 = datasheets.load()["h100"], datasheets.load()["a100"]
    cfg = cluster_model.Config()
    assert cfg.peak_tflops == h100["tflops"]["bfloat16"] and cfg.gpu_memory_gb == h100["memory_gb"]
    assert cfg.intra_bandwidth_gbs == cluster_model.LINKS["nvlink4_h100"].bandwidth_gbs == h100["nvlink_gbps"]
    assert cluster_validation.A100_SELENE["peak_tflops"] == a100["tflops"]["bfloat16"]
    assert cluster_validation.A100_SELENE["intra_bandwidth_gbs"] == a100["nvlink_gbps"]


def test_the_ridge_point_is_computed_once():
    sheet = datasheets.sheets()["h100"]
    ridge = datasheets.ridge_point("h100", "bfloat16")
    assert ridge == pytest.approx(sheet["tflops"]["bfloat16"] * 1e12 / (sheet["memory_gbps"] * 1e9))
    assert sizing.ridge_point("h100", "bfloat16")["flop_per_byte"] == ridge
    assert f"**{ridge:.0f} FLOP/byte**" in site_pages.machine_balance()
    assert datasheets.ridge_point("snapdragon-x-elite-npu", "int8") == pytest.approx(45e12 / 135e9)  # ops per byte
    assert datasheets.ridge_point("h100", "int4") is None and datasheets.ridge_point("no-such-chip", "bfloat16") is None
