"""The built site in a real browser: Debian's Chromium, headless, driven by Playwright.

Every test fails on a console error or on any request to a host other than the local server.
Screenshots of the key pages land in artifacts/screenshots/ (ignored by git), and page load
times in artifacts/browser-timings.json.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlparse

import pytest

from conftest import REPO, set_field
from demos.common import cluster_model

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "artifacts"
SHOTS = ARTIFACTS / "screenshots"
LOAD_BUDGET_S = 1.0
TIMINGS: dict[str, float] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(built_site):
    """A local static server over the built site, stopped (by its PID) when the module ends."""
    site, _ = built_site
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(site)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/"
    for _ in range(100):
        try:
            urllib.request.urlopen(base, timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    yield base
    proc.terminate()
    proc.wait(timeout=10)
    if TIMINGS:
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "browser-timings.json").write_text(json.dumps(TIMINGS, indent=1))
        print("\npage load times (s):", TIMINGS)


@pytest.fixture
def page(chromium, server):
    """A fresh page that records console errors and requests to other hosts; both must stay empty."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    foreign: list[str] = []
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("request", lambda r: foreign.append(r.url)
          if urlparse(r.url).hostname not in ("127.0.0.1", None) and not r.url.startswith("data:") else None)
    pg.base = server
    yield pg
    context.close()
    assert not errors, f"console errors: {errors}"
    assert not foreign, f"requests to other hosts: {foreign}"


def load(pg, path: str, name: str) -> None:
    pg.goto(pg.base + path, wait_until="load")
    seconds = pg.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd / 1000")
    TIMINGS[name] = round(seconds, 3)
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)
    assert seconds < LOAD_BUDGET_S, f"{path} took {seconds:.2f} s to load"


def test_home_renders(page):
    load(page, "", "home")
    assert page.locator("h1").first.inner_text().startswith("ML Systems, Measured")
    assert page.get_by_role("heading", name="Study plans").is_visible()
    assert page.locator("table").first.is_visible()  # the topic map
    assert page.get_by_role("link", name="Kernel fusion").first.is_visible()


def test_topic_page_shows_measured_table_and_plot(page):
    load(page, "topics/kernel-fusion/", "topic-kernel-fusion")
    page.locator(".tabbed-labels label", has_text="CPU").first.click()
    block = page.locator(".tabbed-block:visible").first
    assert block.locator("table").first.is_visible()
    assert "GB/s" in block.inner_text() and "Measured on" in block.inner_text()
    plot = block.locator("img").first
    plot.scroll_into_view_if_needed()
    page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=plot.element_handle(), timeout=10_000)
    block.screenshot(path=str(SHOTS / "topic-measured-cpu.png"))


def test_device_tabs_switch(page):
    page.goto(page.base + "topics/kernel-fusion/")
    labels = page.locator(".tabbed-set").first.locator(".tabbed-labels label")
    names = [labels.nth(i).inner_text() for i in range(labels.count())]
    assert names[-1] == "CPU" and len(names) >= 2  # a GPU tab (measured or "not yet") and CPU
    labels.nth(0).click()
    first = page.locator(".tabbed-block:visible").first.inner_text()
    labels.nth(len(names) - 1).click()
    last = page.locator(".tabbed-block:visible").first.inner_text()
    assert first != last and "Measured on" in last


def test_practice_mode_reveals_answer_and_remembers_known(page):
    load(page, "practice/", "practice")
    answer = page.locator("#mm-card-answer")
    assert page.locator("#mm-card-question").inner_text().strip()
    assert answer.is_hidden()
    page.keyboard.press("Space")
    assert answer.is_visible() and "Full answer" in answer.inner_text()
    page.screenshot(path=str(SHOTS / "practice-revealed.png"))
    question = page.locator("#mm-card-question").inner_text()
    page.keyboard.press("k")
    assert page.locator(".mm-chip-known").is_visible()
    page.keyboard.press("n")  # next card, not the theme's next page
    assert page.url.endswith("/practice/")
    page.reload()
    assert page.locator("#mm-card-question").inner_text() == question
    assert page.locator(".mm-chip-known").is_visible()  # remembered in localStorage
    page.select_option("#mm-filter-difficulty", "hard")
    assert "hard" in page.locator("#mm-card-meta").inner_text() or "No card" in page.locator("#mm-card-question").inner_text()


@pytest.mark.parametrize("term, expected", [
    ("torch.compile", "Kernel fusion"),
    ("all-reduce", "Glossary"),
    ("scaled_dot_product_attention", "Glossary"),
])
def test_search_finds_terms(page, term, expected):
    page.goto(page.base)
    page.locator("label.md-search__icon, .md-search__input").first.click()
    box = page.locator("input.md-search__input")
    page.wait_for_function("() => document.querySelector('.md-search-result__meta')")
    box.press_sequentially(term, delay=20)
    # results render asynchronously (a web worker): wait for the expected page, or time out
    page.locator(".md-search-result__item", has_text=expected).first.wait_for(timeout=10_000)


def test_cheat_sheet_prints_without_navigation(page):
    load(page, "cheat-sheet/", "cheat-sheet")
    assert page.locator(".md-sidebar--primary").first.is_visible()
    page.emulate_media(media="print")
    assert not page.locator(".md-sidebar--primary").first.is_visible()
    assert not page.locator(".md-header").first.is_visible()
    assert "30-second" not in page.locator("h1").first.inner_text()  # the page itself still prints
    assert page.locator("h2").first.is_visible()


def test_cheat_sheet_prints_on_at_most_two_a4_pages(page):
    """Issue 15 item 14: what a candidate rereads before an interview fits two printed A4 pages."""
    import re

    load(page, "cheat-sheet/", "cheat-sheet")
    pdf = page.pdf(format="A4", prefer_css_page_size=True)
    pages = max(int(n) for n in re.findall(rb"/Count (\d+)", pdf))
    assert 1 <= pages <= 2, f"the cheat sheet prints on {pages} A4 pages"


def test_parallel_calculator_agrees_with_the_python_model(page):
    load(page, "topics/parallelism/", "topic-parallelism")
    calculator = page.locator("#parallel-calculator")
    calculator.scroll_into_view_if_needed()
    assert page.locator("#pc-error").is_hidden()
    set_field(page, "pc-model", "70B")
    assert page.locator("#pc-layers").input_value() == "80"  # the preset fills the shape
    for element_id, value in (("pc-gpus", 64), ("pc-tp", 8), ("pc-pp", 4), ("pc-microbatches", 16),
                              ("pc-zero-stage", 1), ("pc-recompute", "selective")):
        set_field(page, element_id, value)
    cfg = cluster_model.Config(**cluster_model.MODELS["70B"], tp=8, pp=4, dp=2, microbatches=16, zero_stage=1,
                        recompute="selective")
    assert page.locator("#pc-dp").inner_text() == "2"
    shown_gb = float(page.locator("#pc-memory-total").inner_text().split()[0])
    assert shown_gb == round(cluster_model.memory_per_gpu(cfg)["total_bytes"] / 1e9, 2)
    shown_bubble = float(page.locator("#pc-bubble").inner_text().split("%")[0])
    assert shown_bubble == round(100 * cluster_model.bubble(cfg)["fraction"], 1)
    calculator.screenshot(path=str(SHOTS / "parallel-calculator.png"))
    set_field(page, "pc-gpus", 60)  # not a multiple of TP x PP
    assert page.locator("#pc-error").is_visible()
    assert "divisible by TP x PP" in page.locator("#pc-error").inner_text()
    assert page.locator("#pc-memory-total").inner_text() == "–"
