"""The timing protocol's stability guard (demos/harness/timing.py): preempted samples are left out, an unstable
measurement is taken again, and a CPU run that stays unstable stops with one line and writes no record."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from demos.harness import timing
from demos.harness.timing import Settings, judge, measure, preempted_flags, summarize
from records.paths import REPO_ROOT

FAST = Settings(warmup=0, min_repeats=8, max_repeats=8, min_time=0.0, flush_l2=False, refuse_unstable=True)


def test_clean_samples_are_stable():
    times = [1.00e-3, 1.02e-3, 0.99e-3, 1.01e-3, 1.03e-3, 1.00e-3]
    stable, why, kept = judge(times, [False] * len(times))
    assert stable and why == "" and kept == times


def test_preempted_samples_are_left_out_of_the_median():
    # two samples hold an 8 ms scheduler slice; the threads waited for a CPU through most of them
    times = [30e-6, 31e-6, 8030e-6, 29e-6, 30e-6, 32e-6, 8031e-6, 30e-6, 31e-6, 30e-6]
    waits = [0, 0, 8e-3, 0, 1e-7, 0, 8e-3, 0, 0, 0]
    ran = [t * 0.9 for t in times]  # one of two cores busy with the work: room for another process
    flags = preempted_flags(times, waits, ran, cpus=2, busy=True)
    assert flags == [False, False, True, False, False, False, True, False, False, False]
    assert preempted_flags(times, waits, ran, cpus=2, busy=False) == [False] * len(times)  # nobody else ran
    t = summarize(0.0, times, flags)
    assert t.stable and t.preempted == 2 and t.stable_samples == 8
    assert t.median_s < 40e-6 and t.p90_s < 40e-6  # no slice in the statistic


def test_waiting_on_its_own_threads_is_not_preemption():
    # the process kept both cores busy itself (OpenMP workers spinning beside another pool): its threads waited
    # for each other, which is part of the work measured, not another process
    times = [1e-3] * 6
    assert preempted_flags(times, [0.3e-3] * 6, [1.95e-3] * 6, cpus=2, busy=True) == [False] * 6
    assert preempted_flags(times, [0.3e-3] * 6, [0.9e-3] * 6, cpus=2, busy=True) == [True] * 6


def test_mostly_preempted_is_unstable():
    times = [8e-3] * 7 + [30e-6] * 3
    stable, why, _ = judge(times, [True] * 7 + [False] * 3)
    assert not stable and "7 of 10 samples preempted" in why


def test_bimodal_samples_are_unstable_by_their_spread():
    times = [30e-6] * 5 + [8e-3] * 5  # no preemption seen (a timer that cannot tell), two modes
    stable, why, _ = judge(times, None)
    assert not stable and "spread" in why


def test_a_ceiling_reports_the_best_stable_sample():
    times = [2.0e-3, 1.5e-3, 1.6e-3, 1.55e-3, 0.2e-3]
    t = summarize(0.0, times, [False, False, False, False, True])  # the preempted one is not a ceiling either
    assert t.best_s == 1.5e-3 and t.median_s == pytest.approx(1.575e-3)


class ScriptedDevice:
    """A CPU-like device whose calls take scripted times and report scripted run-queue waits."""

    kind = "cpu"

    def __init__(self, batches):
        self.batches = list(batches)  # one (times, waits) per time_calls batch after the probe
        self.probed = False

    def sync(self):
        pass

    def flush(self):
        pass

    def time_calls(self, fn, repeats, flush):
        from demos.harness.device import Samples
        out = Samples()
        if not self.probed:
            self.probed = True
            out.append(1e-3)
            out.waits, out.ran = [0.0], [1e-3]
            return out
        times, waits = self.batches.pop(0)
        out.extend(times)
        out.waits = waits
        out.ran = None if waits is None else [t * 0.9 for t in times]  # one thread at work: room for others
        return out


@pytest.fixture
def busy_machine(monkeypatch):
    """/proc/stat, asked after a short window, says other processes keep a core busy."""
    monkeypatch.setattr(timing, "machine_others_cores", lambda: 1.0)


def test_waits_in_a_short_window_on_a_quiet_machine_are_the_process_own(monkeypatch):
    monkeypatch.setattr(timing, "machine_others_cores", lambda: 0.0)
    waited = ([1e-3] * 8, [0.3e-3] * 8)  # every sample waited 30%, but nobody else was running
    t = measure(lambda: None, ScriptedDevice([waited]), FAST, where="test")
    assert t.stable and t.preempted == 0 and t.attempts == 1


def test_an_unstable_measurement_is_taken_again(busy_machine):
    busy = ([8e-3] * 8, [7e-3] * 8)
    quiet = ([1e-3] * 8, [0.0] * 8)
    t = measure(lambda: None, ScriptedDevice([busy, quiet]), FAST, where="test")
    assert t.stable and t.attempts == 2 and t.median_s == 1e-3


def test_a_cpu_run_still_unstable_stops_with_one_line(capsys, busy_machine):
    busy = ([8e-3] * 8, [7e-3] * 8)
    with pytest.raises(SystemExit) as e:
        measure(lambda: None, ScriptedDevice([busy] * timing.ATTEMPTS), FAST, where="demo.py:12")
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: machine busy: load ") and "rerun when quiet" in err and "demo.py:12" in err
    assert len(err.splitlines()) == 1


def test_a_gpu_timing_is_kept_and_flagged(busy_machine):
    class Gpu(ScriptedDevice):
        kind = "cuda"
    busy = ([30e-6] * 4 + [3e-3] * 4, None)
    t = measure(lambda: None, Gpu([busy] * timing.ATTEMPTS), FAST, where="gpu")
    assert not t.stable and t.attempts == timing.ATTEMPTS


@pytest.mark.slow
def test_a_demo_beside_a_cpu_burner_never_saves_slices(tmp_path):
    """One demo run beside processes that keep every core busy: it re-measures until stable or refuses; a record
    it saves holds no measurement the guard judged unstable, and no preempted sample in any statistic."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        time.sleep(0.5)
        # its default size: a record meant for the site (a tiny run only flags what is unstable)
        proc = subprocess.run([sys.executable, "-m", "demos.t3_compiler.launch_overhead", "--device", "cpu",
                               "--results-dir", str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=600)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    record = tmp_path / "launch_overhead" / "cpu.json"
    if proc.returncode == 2:
        assert "machine busy: load" in proc.stderr and not record.exists()
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]
        import json
        stability = json.loads(record.read_text())["stability"]
        assert stability["unstable"] == 0
        assert all(t["stable"] for t in stability["timings"])


def test_the_publication_gate_refuses_ceilings_that_drifted():
    """The bound is what a quiet run of the device shows: 1.25x on a GPU, 1.6x on a shared CPU."""
    from conftest import make_record
    from records import plausibility

    def rec(end, device_class="cpu"):
        return make_record(device_class=device_class, ceilings={"copy_bandwidth": {
            "value": 20.0, "unit": "GB/s", "how": "copy", "samples": [20.0, end]}})

    assert plausibility.drift_max("cpu") == 1.6 and plausibility.drift_max("h100") == 1.25
    assert not any("differ" in p for p in plausibility.vet(rec(14.0), "r"))  # 1.43x: a quiet CPU VM does this
    assert any("ceilings.copy_bandwidth: its start and end samples differ 1.82x (more than 1.6x)" in p
               for p in plausibility.vet(rec(11.0), "r"))
    assert any("differ 1.43x (more than 1.25x)" in p for p in plausibility.vet(rec(14.0, "h100"), "r"))
    assert not any("differ" in p for p in plausibility.vet(rec(18.0, "h100"), "r"))


def test_dirty_means_the_measured_code_differed(monkeypatch):
    """Provenance asks git about the record's own measuring code and the harness, not about the whole tree."""
    from demos.harness import provenance
    asked = []

    def fake_git(*args):
        asked.append(args)
        return {"rev-parse": str(REPO_ROOT) if "--show-toplevel" in args else "0" * 40}.get(args[0], "")

    monkeypatch.setattr(provenance, "_git", fake_git)
    state = provenance.git_state(["demos/t3_compiler/kernel_fusion.py"])
    assert state["dirty"] is False  # git status over those paths printed nothing
    status = next(a for a in asked if a[0] == "status")
    assert status[-2:] == ("demos/t3_compiler/kernel_fusion.py", "demos/harness")
