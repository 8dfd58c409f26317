"""The site builds strictly, with the measured section rendered into the kernel-fusion page."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=REPO,
                          capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", **__import__("os").environ})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return site, time.perf_counter() - started


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
        for host in ("fonts.googleapis.com", "fonts.gstatic.com", "cdn.jsdelivr.net", "unpkg.com"):
            assert host not in text, f"{page} loads from {host}"
