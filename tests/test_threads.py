"""The harness owns the CPU thread policy: a demo declares cpu_threads, its timings run with that many,
the record says so, and the closing ceilings get the machine's threads back."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO
from records import record
from records.paths import RESULTS_DIR

PROBE = """
import json, sys, torch
from demos.harness.run import start
run = start("probe", title="probe", sizes={"tiny": 1, "small": 1, "full": 1}, cpu_threads=1,
            argv=["--device", "cpu", "--size", "tiny", "--results-dir", sys.argv[1]])
run.time(lambda: torch.ones(8).sum())
during = torch.get_num_threads()
run.finish_ceilings()
print(json.dumps({"during": during, "after": torch.get_num_threads(), "machine": run.machine_threads,
                  "policy": run.thread_policy(), "timed": run.timed_with_threads()}))
"""


def test_timings_run_with_the_declared_threads_and_the_ceilings_get_them_back(tmp_path):
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["during"] == 1 and out["timed"] == 1
    assert out["after"] == out["machine"]  # restored before the closing ceilings
    policy = out["policy"]
    assert policy["asked"] == 1 and policy["timings"] == 1 and policy["ceilings"] == out["machine"]


def test_every_cpu_record_states_the_thread_count_its_timings_ran_with():
    for path in sorted(RESULTS_DIR.glob("*/cpu.json")):
        rec = record.load(path)
        policy = rec["settings"].get("cpu_threads")
        assert policy is not None, f"{path}: made before the harness owned the thread policy"
        assert rec["provenance"]["torch_threads"] == policy["timings"], path
        if policy["asked"] is not None:
            assert policy["timings"] == policy["asked"], path


def test_no_demo_sets_thread_counts_itself():
    for path in sorted((REPO / "demos").rglob("*.py")):
        if "harness" in path.parts:
            continue
        text = path.read_text()
        for call in ("set_num_threads(", "threadpool_limits(", "set_num_interop_threads(", "intra_op_num_threads",
                     "inter_op_num_threads"):
            assert call not in text, f"{path} calls {call}: declare start(..., cpu_threads=N) instead"
