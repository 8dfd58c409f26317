"""The site builds strictly, with the measured section rendered into the kernel-fusion page."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


def test_build_is_strict_and_fast(built_site):
    _, seconds = built_site
    assert seconds < 30


def test_kernel_fusion_page_shows_measurements(built_site):
    site, _ = built_site
    html = (site / "topics" / "kernel-fusion" / "index.html").read_text()
    assert "{{" not in html  # every marker was replaced
    assert "tabbed-set" in html and ">CPU</label>" in html
    assert "<table>" in html and "effective bandwidth" in html
    assert 'src="../../assets/plots/kernel_fusion/cpu-bias_gelu.svg"' in html
    assert "mm-holds" in html and "mm-contradicted" not in html
    assert (site / "assets" / "plots" / "kernel_fusion" / "cpu-bias_gelu.svg").read_text().startswith("<?xml")


def test_no_request_to_other_hosts_in_the_built_pages(built_site):
    site, _ = built_site
    for page in site.rglob("*.html"):
        text = page.read_text()
        for host in ("fonts.googleapis.com", "fonts.gstatic.com", "cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com"):
            assert host not in text, f"{page} loads from {host}"  # even a conditional import (nbconvert's mermaid)
        for m in re.finditer(r"<script\b[^>]*>(.*?)</script>", text, re.S):
            assert not re.search(r"import\(\s*[\"']https?://", m.group(1)), f"{page} imports a script from another host"


def test_404_links_follow_the_site_url_under_a_sub_path(tmp_path):
    """A deployment under a sub-path sets SITE_URL; the 404 page's absolute links then stay inside the site."""
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(site)], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "SITE_URL": "https://example.org/sub/", "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    links = re.findall(r'(?:href|src)="(/[^"]*)"', (site / "404.html").read_text())
    assert links and all(link.startswith("/sub/") for link in links), links[:10]


def test_size_budgets(built_site):
    """Issue targets: search index under 2 MB, no page over 1 MB (images are separate files)."""
    site, _ = built_site
    assert (site / "search" / "search_index.json").stat().st_size < 2 * 2**20
    for page in site.rglob("*.html"):
        assert page.stat().st_size < 2**20, page


def test_practice_cards_are_generated_from_the_pages(built_site):
    site, _ = built_site
    html = (site / "practice" / "index.html").read_text()
    data = html.split('<script type="application/json" id="mm-cards">', 1)[1].split("</script>", 1)[0]
    cards = json.loads(data)
    fusion = [c for c in cards if c["topic"] == "T3" and c["kind"] == "question"]
    assert fusion and all(c["difficulty"] in {"easy", "medium", "hard"} for c in cards)
    assert any(c["kind"] == "follow-up" for c in cards)
    assert all(c["answer"].strip() for c in cards)
    urls = {c["url"] for c in cards}
    assert "../topics/kernel-fusion/" in urls  # relative to /practice/
    assert all((site / "practice" / u / "index.html").resolve().exists() for u in urls)
    for card in cards:  # links inside answers point at built pages, relative to /practice/
        for href in re.findall(r'href="([^"#]+)', card["answer"]):
            if not href.startswith(("http", "mailto")):
                assert href.startswith("../") and (site / "practice" / href / "index.html").resolve().exists(), href


def test_each_question_card_has_its_own_answer_and_measured_number(built_site):
    """Issue 15 item 13: a question's card shows that question's 30-second answer (not the page's
    whole section) and the measured number the answer rests on, with its device."""
    site, _ = built_site
    html = (site / "practice" / "index.html").read_text()
    cards = json.loads(html.split('<script type="application/json" id="mm-cards">', 1)[1].split("</script>", 1)[0])
    serving = [c for c in cards if c["topic"] == "T6" and c["kind"] == "question"]
    assert len(serving) >= 4 and len({c["answer"] for c in serving}) == len(serving)
    for card in serving:
        assert "<strong>" not in card["answer"][:40]  # the bold question itself is not repeated
        assert 'class="mm-value"' in card["measured"] and "(CPU)" in card["measured"], card["question"]
    assert all(c["measured"] == "" for c in cards if c["kind"] == "follow-up")


def test_cheat_sheet_and_glossary(built_site):
    site, _ = built_site
    cheat = (site / "cheat-sheet" / "index.html").read_text()
    for href in re.findall(r'href="(\.\./topics/[^"#]+)', cheat):  # links from the topic pages, rewritten
        assert (site / "cheat-sheet" / href / "index.html").resolve().exists(), href
    assert "T3. Kernel fusion" in cheat and "memory-bound" in cheat
    assert "FLOP/byte" in cheat and "{{" not in cheat and "not measured on" not in cheat  # computed, inserted
    glossary = (site / "glossary" / "index.html").read_text()
    assert "NVIDIA Collective Communications Library" in glossary
    topic = (site / "topics" / "kernel-fusion" / "index.html").read_text()
    assert '<abbr title="High Bandwidth Memory' in topic  # a glossary term as a tooltip on a topic page


def test_a_glossary_term_has_one_tooltip_per_section(built_site):
    site, _ = built_site
    page = (site / "topics" / "parallelism" / "index.html").read_text()
    sections = re.split(r"(?=<h[23][ >])", page)
    terms = [re.findall(r'<abbr title="[^"]*">(.*?)</abbr>', s) for s in sections]
    assert all(len(found) == len(set(found)) for found in terms)
    assert sum(len(found) for found in terms) > 20  # the terms are still marked, once per section
    assert page.count("all-reduce") > sum(found.count("all-reduce") for found in terms)  # the rest are plain text
