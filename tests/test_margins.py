"""Claim margins: the check warns about a timing claim with less than 1.4x room, never about a count;
`scripts.margins` reruns a demo and reports each metric's range and each claim's worst-case room."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, TOPIC, make_record, write_record


def warnings_for(site, capsys, claim: str, label: str) -> list[str]:
    rec = make_record(source_digest=site.digest)
    rec["metrics"]["chain.compiled.speedup_largest"]["label"] = label
    write_record(site.results, rec)
    code, _ = site(page=TOPIC.replace("CLAIM", claim))
    out = capsys.readouterr()
    assert code == 0, out.err
    return [line for line in out.out.splitlines() if "room" in line]


def test_a_timing_claim_with_little_room_warns(site, capsys):
    tight = "{{ claim kernel_fusion @cpu chain.compiled.speedup_largest > 1.5 }}"  # 1.8 > 1.5: 1.2x room
    assert warnings_for(site, capsys, tight, "compiled over eager: time of one call")
    roomy = "{{ claim kernel_fusion @cpu chain.compiled.speedup_largest > 1.2 }}"  # 1.5x room
    assert not warnings_for(site, capsys, roomy, "compiled over eager: time of one call")


def test_a_count_claim_never_warns(site, capsys):
    exact = "{{ claim kernel_fusion @cpu chain.compiled.speedup_largest > 1.79 }}"
    assert not warnings_for(site, capsys, exact, "bytes of the input over bytes of the output")


@pytest.mark.slow
def test_margins_reruns_a_demo_and_reports_ranges_and_claims():
    proc = subprocess.run([sys.executable, "-m", "scripts.margins", "transforms", "--runs", "2", "--size", "tiny"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert "transforms on cpu, 2 runs: metric ranges" in proc.stdout
    assert "range" in proc.stdout and "claims (worst case over the runs)" in proc.stdout


def test_margins_refuses_an_unknown_demo():
    proc = subprocess.run([sys.executable, "-m", "scripts.margins", "nope"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown demo 'nope'")
