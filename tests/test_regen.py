"""regen: one failing demo is reported, the others still run, earlier records stay intact."""

from __future__ import annotations

import os
import subprocess
import sys

from rich.console import Console

from conftest import REPO
from scripts import catalog, regen

OK_DEMO = """
import argparse, json, pathlib
p = argparse.ArgumentParser(); p.add_argument("--device"); p.add_argument("--results-dir"); p.add_argument("--size")
a = p.parse_args()
out = pathlib.Path(a.results_dir) / "ok_demo" / "cpu.json"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps({"new": True}))
print("measuring ...")
print(f"wrote {out}")
"""

BAD_DEMO = """
print("measuring ...")
raise RuntimeError("the kernel disagreed with the reference")
"""


def _fake_demos(tmp_path):
    pkg = tmp_path / "fakedemos" / "topic"
    pkg.mkdir(parents=True)
    for init in (tmp_path / "fakedemos" / "__init__.py", pkg / "__init__.py"):
        init.write_text("")
    (pkg / "ok_demo.py").write_text(OK_DEMO)
    (pkg / "bad_demo.py").write_text(BAD_DEMO)
    return {name: catalog.Demo(name, pkg / f"{name}.py", f"fakedemos.topic.{name}") for name in ("bad_demo", "ok_demo")}


def test_a_failing_demo_is_reported_and_its_old_record_kept(tmp_path):
    demos = _fake_demos(tmp_path)
    results = tmp_path / "results"
    old = results / "bad_demo" / "cpu.json"
    old.parent.mkdir(parents=True)
    old.write_text('{"old": true}')
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    console = Console(file=open(os.devnull, "w"))

    outcomes = [regen.run_demo(d, "cpu", None, results, console, 60, env) for d in demos.values()]

    bad, ok = outcomes
    assert not bad.ok and "RuntimeError: the kernel disagreed with the reference" in bad.detail
    assert ok.ok and (results / "ok_demo" / "cpu.json").exists()
    assert old.read_text() == '{"old": true}'
    table = regen.summary_table(outcomes)
    assert [c.header for c in table.columns] == ["demo", "device", "status", "wall time", "record / error"]


def _regen_cli(*args):
    return subprocess.run([sys.executable, "-m", "scripts.regen", *args], cwd=REPO, capture_output=True, text=True)


def test_unknown_demo_is_one_line_and_exit_2():
    proc = _regen_cli("no_such_demo")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "unknown demo 'no_such_demo'" in proc.stderr


def test_unknown_device_is_one_line_and_exit_2():
    proc = _regen_cli("--device", "tpu")
    assert proc.returncode == 2 and proc.stderr.strip() == "error: unknown device 'tpu': choose one of auto, cpu, cuda"


def test_cuda_without_a_gpu_is_one_line_and_exit_2():
    import torch

    if torch.cuda.is_available():
        return
    for command in (["-m", "scripts.regen", "--device", "cuda"],
                    ["-m", "demos.t3_compiler.kernel_fusion", "--device", "cuda"]):
        proc = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and "no CUDA GPU is visible" in proc.stderr
