"""The GPU campaign on a CPU, with stand-in demos: files rewritten after every demo, a hanging demo
killed at its limit while the campaign goes on, the budget stopping new demos and naming the rest,
a second call skipping fresh records; and gpu_unpack taking only valid records home."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import tarfile
import time
from pathlib import Path

import pytest

from conftest import REPO, make_record
from records import catalog
from records.paths import RESULTS_DIR
from records import gpu_set
from scripts import _preflight as preflight_module, gpu_campaign, gpu_unpack

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
    monkeypatch.setattr(gpu_campaign, "ESTIMATES", {**gpu_campaign.ESTIMATES, "process_start_s": 0.0, "demos": estimates})

    def fresh_if_same_code(demo, device_class, folder):  # stand-ins are no harness demos: compare file hashes
        path = Path(folder) / demo.name / f"{device_class}.json"
        if not path.exists():
            return "missing"
        code = hashlib.sha256(demo.path.read_bytes()).hexdigest()
        return "fresh" if json.loads(path.read_text())["digest"] == code else "stale"

    monkeypatch.setattr(catalog, "record_freshness", fresh_if_same_code)


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
    assert summary["estimates_file"] == "scripts/gpu_estimates.toml"
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
    """The plan asks records.catalog (no freshness rule of its own): a fresh record in any folder counts."""
    demos = catalog.discover()
    folders = [tmp_path / "a", tmp_path / "b"]

    def row(name):
        return gpu_campaign.plan(demos, "h100", folders, [name], force=False, model_cached=True)[0]

    assert row("kernel_fusion").status == "" and row("kernel_fusion").reason == "record missing"
    rec = make_record(device_class="h100", source_digest=demos["kernel_fusion"].digest("h100"))
    path = tmp_path / "b" / "kernel_fusion" / "h100.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rec))
    assert catalog.record_freshness(demos["kernel_fusion"], "h100", tmp_path / "b") == "fresh"
    assert row("kernel_fusion").status == "fresh"
    h200 = gpu_campaign.plan(demos, "h200", folders, ["kernel_fusion"], force=False, model_cached=True)[0]
    assert h200.status == "fresh", "either GPU counts: a fresh H100 record is not re-measured on an H200"
    rec["source_digest"] = "sha256:" + "0" * 64  # made by other code
    path.write_text(json.dumps(rec))
    assert row("kernel_fusion").status == "" and row("kernel_fusion").reason == "record stale"


def test_a_commit_that_is_no_hash_is_refused_up_front(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        gpu_campaign.main(["--out", str(tmp_path / "out"), "--device", "cpu", "--commit", "HEAD"])
    assert e.value.code == 2 and "expected a commit hash" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_no_commit_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MM_SOURCE_COMMIT", raising=False)
    monkeypatch.setattr(gpu_campaign, "git_state", lambda: {"commit": None})  # a copy without .git
    with pytest.raises(SystemExit) as e:
        gpu_campaign.main(["--out", str(tmp_path / "out"), "--device", "cpu"])
    assert e.value.code == 2 and "expected a commit hash" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # --out is required unless --plan
        gpu_campaign.main(["--commit", "abc1234", "--device", "cpu"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--out" in err and err.strip().count("\n") == 0


def test_every_demo_of_the_gpu_set_has_an_estimate_or_a_gpu_record():
    """A demo of the GPU set (records/gpu_set.toml) has its line in scripts/gpu_estimates.toml (or a GPU record), so
    the campaign never plans it with the cautious default; a line for any other demo is an error too."""
    gpu = gpu_set.declared().gpu
    table = gpu_campaign.ESTIMATES["demos"]
    missing = [name for name in gpu
               if name not in table and gpu_campaign.last_gpu_wall_time(name, "h100", [RESULTS_DIR]) is None]
    assert not missing, f"add these demos to scripts/gpu_estimates.toml ([demos] name = seconds): {missing}"
    assert not set(table) - set(gpu), f"not in the GPU set: {sorted(set(table) - set(gpu))}"
    assert all(isinstance(s, (int, float)) and s > 0 for s in table.values())
    for key in ("process_start_s", "preflight_s", "t6_training_s", "default_s"):
        assert gpu_campaign.ESTIMATES[key] > 0
    assert all(share > 0 for share in gpu_campaign.ESTIMATES["import_start_s"].values())


def test_the_campaign_reads_in_one_sitting():
    """The campaign is code (its estimates are data in scripts/gpu_estimates.toml): at most 300 lines."""
    lines = Path(gpu_campaign.__file__).read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"scripts/gpu_campaign.py has {lines} lines; keep it at most 300"


def test_a_measured_wall_time_and_its_parts_replace_the_estimate(tmp_path, capsys):
    rec = _gpu_record(wall_time_s=30.0)
    rec["wall_time_parts"] = {"startup_s": 4.0, "ceilings_s": 2.0, "first_calls_s": 20.0, "timed_s": 5.0, "other_s": 3.0}
    (tmp_path / "kernel_fusion").mkdir()
    (tmp_path / "kernel_fusion" / "h100.json").write_text(json.dumps(rec))
    seconds, how = gpu_campaign.last_gpu_wall_time("kernel_fusion", "h100", [tmp_path])
    assert seconds == pytest.approx(34.0)  # wall time plus the measured start-up
    assert "first calls 20 s" in how
    demo = catalog.discover()["kernel_fusion"]
    assert gpu_campaign.estimate(demo, "h200", [tmp_path], True)[0] == pytest.approx(34.0)  # any GPU class serves
    assert gpu_campaign.main(["--plan", "--only", "kernel_fusion", "--published-dir", str(tmp_path),
                              "--staging", str(tmp_path / "staging")]) == 0
    out = capsys.readouterr().out
    assert "| kernel_fusion | call 1 |  | 34 (measured: record h100.json" in out  # the record is stale: re-run


def _plan_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in out.splitlines()
            if line.startswith("| ") and "---" not in line][1:]


def test_plan_prints_the_gpu_set_its_calls_and_what_is_left_without_a_gpu(tmp_path, capsys):
    """`--plan [CLASS] --budget-min N --calls K` (no GPU, no --out): every demo of the GPU set in the campaign's
    order, its time, the call it falls in (or later), each call's total within its budget."""
    assert gpu_campaign.main(["--plan", "--staging", str(tmp_path), "--budget-min", "9", "--calls", "2"]) == 0
    out = capsys.readouterr().out
    rows = _plan_rows(out)
    assert sorted(r[0] for r in rows) == sorted(gpu_set.declared().gpu)  # no CPU-only demo is planned on a GPU
    assert {r[1] for r in rows} <= {"call 1", "call 2", "later", "fresh"}
    for k in (1, 2):
        line = next(x for x in out.splitlines() if x.startswith(f"call {k}: "))
        assert float(line.split()[4]) <= 9.0, line
    assert all(r[1] != "later" for r in rows), "the whole GPU set fits two 9-minute calls"
    assert gpu_campaign.main(["--plan", "h200", "--budget-min", "0.1", "--only", "kernel_fusion,autotune",
                              "--staging", str(tmp_path), "--published-dir", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert "class h200" in out and "remaining (budget): kernel_fusion, autotune" in out


def test_the_first_9_minute_call_holds_the_headline_demos_first(tmp_path, capsys):
    """On a fresh machine (no trained model, no GPU record), H100 or H200, the first call of 9 minutes starts with
    the headline demos in their declared order and holds all of them."""
    headline = list(gpu_set.declared().headline)
    assert len(headline) >= 12 and {"kernel_fusion", "attention_cost", "prefill_decode", "occupancy"} <= set(headline)
    for device_class in ("h100", "h200"):
        assert gpu_campaign.main(["--plan", device_class, "--budget-min", "9", "--staging", str(tmp_path),
                                  "--published-dir", str(tmp_path / "none")]) == 0
        rows = _plan_rows(capsys.readouterr().out)
        assert [r[0] for r in rows[:len(headline)]] == headline
        assert all(r[1] == "call 1" for r in rows[:len(headline)]), rows


def test_a_cpu_only_demo_is_never_run_on_a_gpu(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        gpu_campaign.main(["--plan", "--only", "gbdt", "--staging", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "gbdt is CPU-only by declaration" in err and err.strip().count("\n") == 0
    with pytest.raises(SystemExit) as e:
        gpu_campaign.main(["--plan", "--calls", "0", "--staging", str(tmp_path)])
    assert e.value.code == 2 and "--calls 0" in capsys.readouterr().err


def test_a_missing_required_package_stops_the_campaign_within_seconds(tmp_path, monkeypatch, capsys):
    """jsonschema is not on the GPU machine: without it every demo would fail writing its record, so the
    preflight names it and nothing runs."""
    _stand_ins(tmp_path, monkeypatch, {"first": 1}, {"first": ""})
    monkeypatch.setattr(preflight_module, "REQUIRED", (*preflight_module.REQUIRED, "no_such_package_in_this_venv"))
    started = time.perf_counter()
    with pytest.raises(SystemExit) as e:
        _campaign(tmp_path)
    assert e.value.code == 2 and time.perf_counter() - started < 10 and _steps(tmp_path) == []
    err = capsys.readouterr().err.strip()
    assert "missing required package(s): no_such_package_in_this_venv" in err and err.count("\n") == 0
    assert json.loads((tmp_path / "out" / "preflight.json").read_text())["missing_required"] == \
        ["no_such_package_in_this_venv"]


def test_the_required_packages_are_what_the_harness_the_core_and_regen_import():
    from records import digest

    files = [*(REPO / "demos" / "harness").glob("*.py"), *(REPO / "records").glob("*.py"),
             REPO / "scripts" / "regen.py", REPO / "scripts" / "gpu_campaign.py"]
    imported = set().union(*(digest.third_party_packages(f) for f in files))
    assert imported <= set(preflight_module.REQUIRED), sorted(imported - set(preflight_module.REQUIRED))


def test_process_start_counts_the_packages_a_demo_imports(tmp_path):
    """A demo's estimated start adds an import share only for the packages its own code (or a local helper
    it imports) imports; the harness's imports are in the base."""
    demos, est = catalog.discover(), gpu_campaign.ESTIMATES
    base, jax_share = est["process_start_s"], est["import_start_s"]["jax"]
    assert gpu_campaign.estimate(demos["kmeans_search"], "h100", [tmp_path], True) == \
        (est["demos"]["kmeans_search"] + base + est["import_start_s"]["sklearn"], "estimated (start with sklearn)")
    assert gpu_campaign.estimate(demos["jax_lowering"], "h100", [tmp_path], True) == \
        (est["default_s"] + base + jax_share, "estimated (start with jax)")  # CPU-only: no line of its own
    assert gpu_campaign.estimate(demos["layout_and_padding"], "h100", [tmp_path], True) == \
        (est["demos"]["layout_and_padding"] + base, "estimated")  # torch only
    assert "sklearn" in gpu_campaign.estimate(demos["distillation"], "h100", [tmp_path], True)[1]  # via _model.py
    (tmp_path / "topic").mkdir()
    (tmp_path / "topic" / "no_such_demo.py").write_text("import json\n")
    stray = catalog.Demo("no_such_demo", tmp_path / "topic" / "no_such_demo.py", "topic.no_such_demo")
    assert gpu_campaign.estimate(stray, "h100", [tmp_path], True) == (est["default_s"] + base, "estimated")


def test_the_t6_training_is_charged_to_the_demos_whose_code_trains_the_model(tmp_path):
    """Read from the code (a call to trained_models), not a hand-kept list: paged_kv was once missed. A plan
    charges the training once: whichever demo trains the model first, the others find it cached."""
    demos = catalog.discover()

    def source(name, cached=False):
        return gpu_campaign.estimate(demos[name], "h100", [tmp_path], cached)[1]

    assert "+ T6 model training" in source("paged_kv") and "+ T6 model training" in source("speculative")
    assert "training" not in source("prefill_decode")  # random weights, no training
    assert "training" not in source("kernel_fusion") and "training" not in source("paged_kv", cached=True)
    trained = gpu_campaign.estimate(demos["paged_kv"], "h100", [tmp_path], False)[0]
    assert trained == pytest.approx(gpu_campaign.estimate(demos["paged_kv"], "h100", [tmp_path], True)[0]
                                    + gpu_campaign.ESTIMATES["t6_training_s"])
    rows = gpu_campaign.plan(demos, "h100", [tmp_path], ["weight_only_int8", "paged_kv", "speculative"], False, False)
    assert sorted("+ T6 model train" + r.estimate_from.split("+ T6 model train")[1] for r in rows) == \
        ["+ T6 model trained by an earlier demo"] * 2 + ["+ T6 model training"]


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


def test_the_campaign_applies_the_publication_gate_to_what_a_demo_wrote(tmp_path, record_factory):
    """A GPU record above its datasheet is flagged in the summary, by the same gate as the check and unpack."""
    demos = catalog.discover()
    good = record_factory(device_class="h100")
    bad = record_factory(device_class="h100")
    bad["metrics"]["chain.eager.gbps"].update(value=99999.0, fraction_of_ceiling=99999.0 / 20.0)
    for folder, rec in (("good", good), ("bad", bad)):
        path = tmp_path / folder / "kernel_fusion" / "h100.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(rec))
    assert gpu_campaign.gate(demos, "kernel_fusion", "h100", tmp_path / "good") == []
    problems = gpu_campaign.gate(demos, "kernel_fusion", "h100", tmp_path / "bad")
    assert any("exceeds the H100 datasheet memory bandwidth" in p for p in problems), problems


def test_the_plan_runs_a_reader_after_what_it_reads(tmp_path):
    demos = catalog.discover()
    order = [r.demo for r in gpu_campaign.plan(demos, "h100", [tmp_path], [], False, False)]
    assert order.index("kernel_fusion") < order.index("machine_laws")
    assert order.index("layout_and_padding") < order.index("machine_laws")
    assert order[-1] == "regression_gate"  # it reads every record


def test_a_reader_in_a_campaign_reads_the_staged_record_and_its_digest_hashes_it(tmp_path, monkeypatch, record_factory):
    """machine_laws on the first H200 window read docs/results, where the campaign had not put kernel_fusion's
    record (it was staged), so its roofline lacked the GPU kernels and the record was stale once unpacked."""
    from records import digest, paths
    from records.inputs import declare

    staged = record_factory(device_class="h200")
    path = tmp_path / "kernel_fusion" / "h200.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(staged))
    reader = declare(records=["kernel_fusion/{device}", "*/h200"])
    declared = {"records": ["kernel_fusion/{device}"]}
    monkeypatch.delenv(paths.STAGED_RESULTS_ENV, raising=False)
    published = digest.input_hashes(declared, "machine_laws", "h200")["record kernel_fusion/h200"]
    monkeypatch.setenv(paths.STAGED_RESULTS_ENV, str(tmp_path))
    assert reader.record("kernel_fusion", "h200") is not None
    assert "kernel_fusion" in reader.records("h200")
    hashed = digest.input_hashes(declared, "machine_laws", "h200")["record kernel_fusion/h200"]
    assert hashed == digest.content_hash(digest.measured_content(staged)) != published


def test_the_documented_window_is_one_command_that_leaves_the_gpu_kind_to_whatever_is_free():
    """docs/contributing.md's window: one `run` call naming no machine kind (an H100 or an H200, whichever is free),
    its command under the tool's 2,000 characters, through scripts/gpu_window.sh, which carries the wheels in."""
    guide = (REPO / "docs" / "contributing.md").read_text(encoding="utf-8")
    calls = re.findall(r"^\s*run\((.*)\)\s*$", guide, flags=re.M)
    assert len(calls) == 1 and "kind" not in calls[0], calls
    command = re.search(r'command="([^"]*)"', calls[0]).group(1)
    assert len(command) < 2000 and command.startswith("bash scripts/gpu_window.sh ")
    assert ".cache/wheels" in calls[0] and "nvidia-h100" not in guide
    script = (REPO / "scripts" / "gpu_window.sh").read_text(encoding="utf-8")
    assert "scripts.gpu_campaign --out" in script and ".cache/wheels" in script


def test_ctrl_c_in_a_campaign_is_one_line_and_keeps_what_finished(tmp_path, monkeypatch, capsys):
    _stand_ins(tmp_path, monkeypatch, {"first": 1, "second": 2}, {"first": "", "second": ""})
    real_run_demo = gpu_campaign.regen.run_demo

    def ctrl_c_at_second(demo, *args, **kwargs):
        if demo.name == "second":
            raise KeyboardInterrupt
        return real_run_demo(demo, *args, **kwargs)

    monkeypatch.setattr(gpu_campaign.regen, "run_demo", ctrl_c_at_second)
    with pytest.raises(SystemExit) as stop:  # SystemExit(130): Python prints no traceback for it
        _campaign(tmp_path)
    assert stop.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("gpu_campaign: interrupted; the records that finished are kept")
    assert _summary(tmp_path)["first"]["status"] == "ok"
