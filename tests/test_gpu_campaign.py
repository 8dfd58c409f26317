"""The GPU campaign on a CPU, with stand-in demos: files rewritten after every demo, a hanging demo
killed at its limit while the campaign goes on, the budget stopping new demos and naming the rest,
a second call skipping fresh records; and gpu_unpack taking only valid records home."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import time
from pathlib import Path

import pytest

from conftest import REPO, make_record
from records import catalog
from scripts import gpu_campaign, gpu_unpack

# A stand-in demo writes a small JSON "record" with the hash of its own file (what the freshness rule
# compares), after doing what its name says. STEP_LOG collects the order in which demos ran.
OK = """
import argparse, hashlib, json, os, pathlib
p = argparse.ArgumentParser(); p.add_argument("--device"); p.add_argument("--results-dir"); p.add_argument("--size")
a = p.parse_args()
name = pathlib.Path(__file__).stem
with open(os.environ["STEP_LOG"], "a") as f:
    f.write(name + "\\n")
BEFORE
out = pathlib.Path(a.results_dir) / name / "cpu.json"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps({"demo": name, "digest": hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()}))
print(f"wrote {out}")
"""
LIST_ARCHIVE = """
import tarfile
with tarfile.open(os.path.join(os.environ["CAMPAIGN_OUT"], "records.tar.gz")) as t:
    pathlib.Path(os.environ["SEEN"]).write_text("\\n".join(t.getnames()))
"""
HANG = "import time\ntime.sleep(300)  # silent, forever"
FAIL = "raise RuntimeError('check failed: the kernel disagreed')"


def _stand_ins(tmp_path, monkeypatch, estimates: dict[str, float], behaviours: dict[str, str]):
    pkg = tmp_path / "fakedemos" / "topic"
    pkg.mkdir(parents=True)
    for init in (tmp_path / "fakedemos" / "__init__.py", pkg / "__init__.py"):
        init.write_text("")
    for name, before in behaviours.items():
        (pkg / f"{name}.py").write_text(OK.replace("BEFORE", before))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{REPO}")
    monkeypatch.setenv("STEP_LOG", str(tmp_path / "steps"))
    monkeypatch.setenv("CAMPAIGN_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("SEEN", str(tmp_path / "seen"))
    monkeypatch.setattr(gpu_campaign, "ESTIMATES_S", {k: (v, "test") for k, v in estimates.items()})
    monkeypatch.setattr(gpu_campaign, "PROCESS_START_S", 0.0)
    monkeypatch.setattr(gpu_campaign, "gpu_marker_counts", lambda: {})

    def fresh_if_same_code(demo, device_class, folders):  # stand-ins are no harness demos: compare file hashes
        for folder in folders:
            path = Path(folder) / demo.name / f"{device_class}.json"
            if path.exists():
                code = hashlib.sha256(demo.path.read_bytes()).hexdigest()
                return "fresh" if json.loads(path.read_text())["digest"] == code else "stale"
        return "missing"

    monkeypatch.setattr(gpu_campaign, "freshness", fresh_if_same_code)


def _campaign(tmp_path, *extra) -> int:
    return gpu_campaign.main(["--out", str(tmp_path / "out"), "--commit", "abc1234", "--device", "cpu",
                              "--size", "tiny", "--demos-dir", str(tmp_path / "fakedemos"),
                              "--staging", str(tmp_path / "staging"), "--published-dir", str(tmp_path / "published"),
                              *extra])


def _summary(tmp_path) -> dict:
    return {r["demo"]: r for r in json.loads((tmp_path / "out" / "summary.json").read_text())["rows"]}


def _steps(tmp_path) -> list[str]:
    return (tmp_path / "steps").read_text().split() if (tmp_path / "steps").exists() else []


def test_the_records_archive_is_rewritten_after_every_demo(tmp_path, monkeypatch):
    _stand_ins(tmp_path, monkeypatch, {"first": 1, "second": 2}, {"first": "", "second": LIST_ARCHIVE})
    assert _campaign(tmp_path) == 0
    assert _steps(tmp_path) == ["first", "second"]
    # when "second" started, the archive already held the record "first" wrote
    assert (tmp_path / "seen").read_text().split() == ["docs/results/first/cpu.json"]
    with tarfile.open(tmp_path / "out" / "records.tar.gz") as t:
        assert sorted(t.getnames()) == ["docs/results/first/cpu.json", "docs/results/second/cpu.json"]
    with tarfile.open(tmp_path / "out" / "logs.tar.gz") as t:
        names = t.getnames()
    assert any(n.startswith("logs/first-cpu-") for n in names) and "logs/preflight.json" in names
    # the fixed set of files, directly under --out (the GPU machine returns at most 8, two folders deep)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == \
        ["logs.tar.gz", "preflight.json", "records.tar.gz", "summary.json", "summary.md"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["commit"] == "abc1234" and summary["device_class"] == "cpu"
    assert "| first | ok |" in (tmp_path / "out" / "summary.md").read_text()
    preflight = json.loads((tmp_path / "out" / "preflight.json").read_text())
    assert preflight["packages"]["torch"] and preflight["wall_s"] < 30 and "missing_packages" in preflight


def test_a_hanging_demo_is_killed_at_its_limit_and_the_campaign_goes_on(tmp_path, monkeypatch):
    _stand_ins(tmp_path, monkeypatch, {"broken": 1, "hangs": 2, "after": 3}, {"broken": FAIL, "hangs": HANG, "after": ""})
    started = time.perf_counter()
    assert _campaign(tmp_path, "--demo-limit-s", "3") == 1
    assert time.perf_counter() - started < 60
    rows = _summary(tmp_path)
    assert rows["broken"]["status"] == "failed" and "check failed" in rows["broken"]["reason"]
    assert rows["hangs"]["status"] == "timeout" and "timed out after 3 s" in rows["hangs"]["reason"]
    assert rows["after"]["status"] == "ok"
    with tarfile.open(tmp_path / "out" / "records.tar.gz") as t:
        assert t.getnames() == ["docs/results/after/cpu.json"]


def test_the_budget_stops_new_demos_and_names_the_remaining_ones(tmp_path, monkeypatch):
    _stand_ins(tmp_path, monkeypatch, {"quick": 1, "huge": 600, "quick2": 2}, {"quick": "", "huge": "", "quick2": ""})
    assert _campaign(tmp_path, "--budget-min", "1") == 0
    rows = _summary(tmp_path)
    assert rows["quick"]["status"] == rows["quick2"]["status"] == "ok"
    assert rows["huge"]["status"] == "not started (budget)" and "estimated 600 s" in rows["huge"]["reason"]
    assert "huge" not in _steps(tmp_path)
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["remaining"] == ["huge"]
    assert "remaining (budget): huge" in (tmp_path / "out" / "summary.md").read_text()


def test_a_second_call_runs_only_what_is_missing_or_stale(tmp_path, monkeypatch):
    _stand_ins(tmp_path, monkeypatch, {"done": 1, "changed": 2}, {"done": "", "changed": ""})
    assert _campaign(tmp_path) == 0
    assert _steps(tmp_path) == ["done", "changed"]
    (tmp_path / "fakedemos" / "topic" / "changed.py").write_text(OK.replace("BEFORE", "x = 1  # new code"))
    assert _campaign(tmp_path) == 0
    assert _steps(tmp_path) == ["done", "changed", "changed"], "the fresh record must not be re-measured"
    rows = _summary(tmp_path)
    assert rows["done"]["status"] == "fresh" and rows["changed"]["status"] == "ok"
    assert "record stale" not in rows["changed"]["reason"]  # it ran, and says what it wrote


def test_campaign_freshness_reads_the_real_rule(tmp_path):
    demo = catalog.discover()["kernel_fusion"]
    assert gpu_campaign.freshness(demo, "h100", [tmp_path / "a", tmp_path / "b"]) == "missing"
    rec = make_record(device_class="h100", source_digest=demo.digest("h100"))
    rec["provenance"]["device_class"] = "h100"
    path = tmp_path / "b" / "kernel_fusion" / "h100.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rec))
    assert gpu_campaign.freshness(demo, "h100", [tmp_path / "a", tmp_path / "b"]) == \
        catalog.record_freshness(demo, "h100", tmp_path / "b")


def test_a_commit_that_is_no_hash_is_refused_up_front(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        gpu_campaign.main(["--out", str(tmp_path / "out"), "--device", "cpu", "--commit", "HEAD"])
    assert e.value.code == 2 and "expected a commit hash" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_no_commit_is_one_line_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.delenv("MM_SOURCE_COMMIT", raising=False)
    monkeypatch.setattr(gpu_campaign, "resolve_commit", lambda asked: asked)
    with pytest.raises(SystemExit) as e:
        gpu_campaign.main(["--out", str(tmp_path / "out"), "--device", "cpu"])
    assert e.value.code == 2


def test_every_demo_has_a_reasoned_gpu_estimate():
    """A new demo declares its GPU time (and why) in ESTIMATES_S, so the campaign can plan a window."""
    missing = set(catalog.discover()) - set(gpu_campaign.ESTIMATES_S)
    assert not missing, f"add these demos to ESTIMATES_S in scripts/gpu_campaign.py: {sorted(missing)}"
    assert all(seconds > 0 and len(how) > 20 for seconds, how in gpu_campaign.ESTIMATES_S.values())


def test_the_budget_table_uses_a_measured_wall_time_and_its_parts(tmp_path, monkeypatch):
    rec = _gpu_record(wall_time_s=30.0)
    rec["wall_time_parts"] = {"startup_s": 4.0, "ceilings_s": 2.0, "first_calls_s": 20.0, "timed_s": 5.0, "other_s": 3.0}
    (tmp_path / "kernel_fusion").mkdir()
    (tmp_path / "kernel_fusion" / "h100.json").write_text(json.dumps(rec))
    seconds, how = gpu_campaign.last_gpu_wall_time("kernel_fusion", "h100", [tmp_path])
    assert seconds + gpu_campaign.PROCESS_START_S == pytest.approx(34.0)  # wall time plus the measured start-up
    assert "first calls 20 s" in how
    table = gpu_campaign.estimates_table("h100", [tmp_path])
    assert "| kernel_fusion | 34 | measured" in table
    assert table.startswith("**The whole GPU campaign:") and "1 of" in table


def test_process_start_counts_the_packages_a_demo_imports(tmp_path):
    """A demo's estimated start adds an import share only for the packages its own code (or a local helper
    it imports) imports; the harness's imports are in the base; the table's estimate uses it."""
    base, jax_share = gpu_campaign.PROCESS_START_S, gpu_campaign.IMPORT_START_S["jax"][0]
    assert gpu_campaign.process_start_s("jax_lowering") == (base + jax_share, ["jax"])
    assert gpu_campaign.process_start_s("layout_and_padding") == (base, [])  # torch only
    assert "sklearn" in gpu_campaign.process_start_s("distillation")[1]  # through demos/t5_compression/_model.py
    assert gpu_campaign.process_start_s("no_such_demo") == (base, [])
    seconds, source = gpu_campaign.estimate("jax_lowering", "h100", [tmp_path])  # no GPU record there
    assert source == "table"
    assert seconds == pytest.approx(gpu_campaign.ESTIMATES_S["jax_lowering"][0] + base + jax_share)


def test_the_t6_training_is_charged_to_the_demos_whose_code_trains_the_model(tmp_path, monkeypatch):
    """Read from the code (a call to trained_models), not a hand-kept list: paged_kv was once missed."""
    assert gpu_campaign.trains_t6_model("paged_kv") and gpu_campaign.trains_t6_model("speculative")
    assert not gpu_campaign.trains_t6_model("prefill_decode")  # random weights, no training
    assert not gpu_campaign.trains_t6_model("kernel_fusion") and not gpu_campaign.trains_t6_model("no_such_demo")
    monkeypatch.setattr(gpu_campaign, "T6_MODEL_CACHE", tmp_path / "models")  # an empty cache: training owed
    with_training, source = gpu_campaign.estimate("paged_kv", "h100", [tmp_path])
    assert source == "table + T6 model training"
    assert with_training == pytest.approx(gpu_campaign.ESTIMATES_S["paged_kv"][0]
                                          + gpu_campaign.process_start_s("paged_kv")[0] + gpu_campaign.T6_TRAINING_S[0])
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "full-target.pt").write_bytes(b"")  # a trained model on the machine: none owed
    assert gpu_campaign.estimate("paged_kv", "h100", [tmp_path])[1] == "table"


def test_gpu_markers_put_pages_with_gpu_claims_first():
    counts = gpu_campaign.gpu_marker_counts()
    assert counts.get("kernel_fusion", 0) > 0


# -- gpu_unpack ----------------------------------------------------------------------------------------

def _archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _gpu_record(**overrides) -> dict:
    rec = make_record(device_class="h100", **overrides)
    rec["provenance"].update(device_class="h100", device_kind="cuda", device_name="NVIDIA H100 80GB HBM3")
    return rec


def test_unpack_copies_valid_records_and_refuses_the_rest(tmp_path):
    good = _gpu_record()
    fixture = {**_gpu_record(), "fixture": True}
    archive = _archive(tmp_path / "records.tar.gz", {
        "docs/results/kernel_fusion/h100.json": json.dumps(good).encode(),
        "docs/results/kernel_fusion/h200.json": json.dumps(good).encode(),  # class differs from its name
        "docs/results/autotune/h100.json": b"{not json",
        "docs/results/launch_overhead/h100.json": json.dumps({**fixture, "demo": "launch_overhead"}).encode(),
        "../../etc/passwd": b"x",
    })
    out = tmp_path / "results"
    copied, refused = gpu_unpack.unpack(archive, out)
    assert [Path(c.split(" ")[0]).name for c in copied] == ["h100.json"]
    assert json.loads((out / "kernel_fusion" / "h100.json").read_text())["device_class"] == "h100"
    assert len(refused) == 4 and not (out / "autotune").exists() and not (out / "launch_overhead").exists()
    assert any("but the file sits at kernel_fusion/h200.json" in r for r in refused) and any("fixture" in r for r in refused)
    assert any(r.startswith("../../etc/passwd") for r in refused)
    assert all("\n" not in r for r in refused)


def test_unpack_cli_exit_codes(tmp_path):
    import subprocess

    archive = _archive(tmp_path / "r.tar.gz", {"docs/results/kernel_fusion/h100.json": json.dumps(_gpu_record()).encode()})
    ok = subprocess.run([sys.executable, "-m", "scripts.gpu_unpack", str(archive), "--results-dir", str(tmp_path / "res")],
                        cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    missing = subprocess.run([sys.executable, "-m", "scripts.gpu_unpack", str(tmp_path / "nope.tar.gz")],
                             cwd=REPO, capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0


def test_fixture_records_are_valid_marked_and_never_published():
    from records import record

    fixtures = sorted((REPO / "tests" / "fixtures" / "records").glob("*/h100.json"))
    assert {p.parent.name for p in fixtures} >= {"kernel_fusion", "attention_cost"}
    for path in fixtures:
        rec = record.load(path)
        assert rec["fixture"] is True and rec["title"].startswith("FIXTURE")
        assert rec["provenance"]["device_name"] == "FIXTURE (not a measurement)"
        assert rec["demo"] in catalog.discover() and rec["device_class"] == path.stem == "h100"
        for name, metric in rec["metrics"].items():  # shaped like the real thing: fractions agree with the ceilings
            if "ceiling" in metric:
                assert abs(metric["fraction_of_ceiling"] - metric["value"] / rec["ceilings"][metric["ceiling"]]["value"]) < 1e-9
        assert not (REPO / "docs" / "results" / rec["demo"] / "h100.json").exists() or \
            not json.loads((REPO / "docs" / "results" / rec["demo"] / "h100.json").read_text()).get("fixture")


def test_a_campaign_stopped_from_outside_says_what_finished_and_what_remains(tmp_path, monkeypatch):
    _stand_ins(tmp_path, monkeypatch, {"first": 1, "second": 2, "third": 3}, {"first": "", "second": "", "third": ""})
    real_run_demo = gpu_campaign.regen.run_demo

    def stopped_at_second(demo, *args, **kwargs):
        if demo.name == "second":
            raise SystemExit(143)  # what SIGTERM turns into inside regen.signals_raise
        return real_run_demo(demo, *args, **kwargs)

    monkeypatch.setattr(gpu_campaign.regen, "run_demo", stopped_at_second)
    with pytest.raises(SystemExit):
        _campaign(tmp_path)
    rows = _summary(tmp_path)
    assert rows["first"]["status"] == "ok"
    assert rows["second"]["status"] == "interrupted" and rows["third"]["status"] == "not started (interrupted)"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["remaining"] == ["second", "third"]
    with tarfile.open(tmp_path / "out" / "records.tar.gz") as t:
        assert t.getnames() == ["docs/results/first/cpu.json"]
