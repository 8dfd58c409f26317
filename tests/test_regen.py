"""regen: one failing demo is reported, the others still run, earlier records stay intact."""

from __future__ import annotations

import os
import subprocess
import sys

from rich.console import Console

from conftest import REPO
from records import catalog
from scripts import regen

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
raise RuntimeError("[/__w/gloo/unbound_buffer.cc:78] the kernel disagreed with the reference")  # not rich markup
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
    assert not bad.ok and "RuntimeError: [/__w/gloo/unbound_buffer.cc:78] the kernel disagreed with the reference" in bad.detail
    assert ok.ok and (results / "ok_demo" / "cpu.json").exists()
    assert old.read_text() == '{"old": true}'
    table = regen.summary_table(outcomes)
    assert [c.header for c in table.columns] == ["demo", "device", "status", "wall time", "record / error"]
    shown = Console(record=True, width=400, file=open(os.devnull, "w"))
    shown.print(table)  # a gloo error's "[/__w/...]" once crashed this as a closing markup tag
    assert "[/__w/gloo/unbound_buffer.cc:78]" in shown.export_text()


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


# -- issue 14 item 7: a hard deadline, one regen per demo and device, no orphans, caller-relative paths,
# one log per run. Each test uses tiny stand-in demos in a temporary folder, never a real demo.

import signal
import time
from pathlib import Path

HANG_DEMO = """
import argparse, os, pathlib, subprocess, sys, time
p = argparse.ArgumentParser(); p.add_argument("--device"); p.add_argument("--results-dir"); p.add_argument("--size")
a = p.parse_args()
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])  # a worker in the same group
folder = pathlib.Path(a.results_dir) / "hang_demo"
folder.mkdir(parents=True, exist_ok=True)
(folder / ".cpu.json.half.tmp").write_text("half a record")  # as if killed in the middle of an atomic write
(pathlib.Path(os.environ["PID_FILE"])).write_text(f"{os.getpid()} {helper.pid}")
time.sleep(300)  # silent: prints nothing, ever
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_for(predicate, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _fake_demo_set(tmp_path):
    demos = _fake_demos(tmp_path)
    pkg = tmp_path / "fakedemos" / "topic"
    (pkg / "hang_demo.py").write_text(HANG_DEMO)
    demos["hang_demo"] = catalog.Demo("hang_demo", pkg / "hang_demo.py", "fakedemos.topic.hang_demo")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "PID_FILE": str(tmp_path / "pids")}
    return demos, env


def _pids(tmp_path) -> list[int]:
    return [int(p) for p in (tmp_path / "pids").read_text().split()]


def test_timeout_fires_on_a_silent_demo_and_kills_its_whole_group(tmp_path):
    demos, env = _fake_demo_set(tmp_path)
    console = Console(file=open(os.devnull, "w"))
    started = time.perf_counter()
    outcome = regen.run_demo(demos["hang_demo"], "cpu", None, tmp_path / "results", console, 3, env,
                             log_dir=tmp_path / "logs")
    assert time.perf_counter() - started < 20, "the deadline must not wait for the demo to print"
    assert not outcome.ok and outcome.status == "timeout" and "timed out after 3 s" in outcome.detail
    demo_pid, helper_pid = _pids(tmp_path)
    assert _wait_for(lambda: not _alive(demo_pid) and not _alive(helper_pid), 10), "the demo's group must be killed"
    assert not list((tmp_path / "results" / "hang_demo").glob(".*.tmp")), "a killed write leaves no temp file"


def test_a_second_regen_of_the_same_demo_and_device_is_refused_in_one_line(tmp_path):
    demos, env = _fake_demo_set(tmp_path)
    with regen.demo_lock("ok_demo", "cpu"):  # as if another regen were running it right now
        proc = subprocess.run([sys.executable, "-m", "scripts.regen", "ok_demo", "--demos-dir", str(tmp_path / "fakedemos"),
                               "--results-dir", str(tmp_path / "results")], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=120)
    assert proc.returncode == 1
    errors = [line for line in proc.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "another regen of ok_demo on cpu is running" in errors[0]
    assert not (tmp_path / "results" / "ok_demo" / "cpu.json").exists(), "the second regen must not run the demo"
    # once the first is done, the lock is free again
    outcome = regen.run_demo(demos["ok_demo"], "cpu", None, tmp_path / "results", Console(file=open(os.devnull, "w")),
                             60, env, log_dir=tmp_path / "logs")
    assert outcome.ok


def test_sigterm_to_regen_kills_the_running_demo_and_its_workers(tmp_path):
    _, env = _fake_demo_set(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "scripts.regen", "hang_demo", "--demos-dir",
                             str(tmp_path / "fakedemos"), "--results-dir", str(tmp_path / "results"), "--timeout", "300"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_for(lambda: (tmp_path / "pids").exists() and len(_pids(tmp_path)) == 2, 60)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        demo_pid, helper_pid = _pids(tmp_path)
        assert _wait_for(lambda: not _alive(demo_pid) and not _alive(helper_pid), 10), "no orphan may survive regen"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _pids(tmp_path) if (tmp_path / "pids").exists() else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_relative_results_dir_is_read_from_the_callers_directory(tmp_path):
    _, env = _fake_demo_set(tmp_path)
    caller = tmp_path / "caller"
    caller.mkdir()
    proc = subprocess.run([sys.executable, "-m", "scripts.regen", "ok_demo", "--demos-dir", str(tmp_path / "fakedemos"),
                           "--results-dir", "my-results"], cwd=caller, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (caller / "my-results" / "ok_demo" / "cpu.json").exists()
    assert not (REPO / "my-results").exists()


def test_each_run_writes_its_own_log(tmp_path):
    demos, env = _fake_demo_set(tmp_path)
    console = Console(file=open(os.devnull, "w"))
    first = regen.run_demo(demos["ok_demo"], "cpu", None, tmp_path / "results", console, 60, env, log_dir=tmp_path / "logs")
    second = regen.run_demo(demos["ok_demo"], "cpu", None, tmp_path / "results", console, 60, env, log_dir=tmp_path / "logs")
    assert first.log != second.log and first.log.exists() and second.log.exists()
    assert "measuring" in first.log.read_text() and "measuring" in second.log.read_text()


def test_a_demo_dies_with_regen_even_when_regen_is_killed_outright(tmp_path):
    _, env = _fake_demo_set(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "scripts.regen", "hang_demo", "--demos-dir",
                             str(tmp_path / "fakedemos"), "--results-dir", str(tmp_path / "results"), "--timeout", "300"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_for(lambda: (tmp_path / "pids").exists() and len(_pids(tmp_path)) == 2, 60)
        proc.kill()  # SIGKILL: no handler runs
        proc.wait(timeout=20)
        demo_pid, _ = _pids(tmp_path)
        assert _wait_for(lambda: not _alive(demo_pid), 10), "the demo must not outlive a killed regen"
    finally:
        for pid in _pids(tmp_path) if (tmp_path / "pids").exists() else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
