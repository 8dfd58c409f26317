"""The C++ library: built, called from Python threads, RAII under an exception, the planted
out-of-bounds write caught by AddressSanitizer; and the library used directly from a test."""

from __future__ import annotations

import shutil
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from conftest import checks_by_name, demo_record, metric

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
tiny_record = demo_record("demos.t11_gpu.cpp_extension")


@pytest.mark.slow
def test_the_demo_checks(tiny_record):
    checks = checks_by_name(tiny_record)
    assert {"threads.results", "threads.calls_counted", "threads.plans_built_once", "raii.exception_frees",
            "asan.catches_oob", "unsupported_tile_refused"} <= set(checks)
    # every (dtype, tile) instantiation checked against PyTorch: one plan each
    cpu = {n for n in checks if n.startswith("cpu.")}
    assert cpu == {f"cpu.{d}.tile{t}" for d in ("float32", "float64") for t in (8, 16, 32)}
    assert metric(tiny_record, "threads.plans_built") == 6
    assert "heap-buffer-overflow" in tiny_record["artifacts"]["asan_report"]
    assert "compute-sanitizer on the CUDA build" in {n["variant"] for n in tiny_record["not_run"]}


def test_library_from_threads_directly():
    """A second, independent use of the library: threads with different tiles on different shapes."""
    from demos.t11_gpu import _cpp

    lib = _cpp.load(_cpp.build_cpu_library())

    def job(i):
        rows, cols = 17 + i, 33 + 2 * i  # ragged: no multiple of any tile
        a = torch.randn(rows, cols, dtype=torch.float64)
        out = torch.empty(cols, rows, dtype=torch.float64)
        assert lib.t11_scale_transpose(1, (8, 16, 32)[i % 3], a.data_ptr(), out.data_ptr(), rows, cols, -0.5) == 0
        return torch.equal(out, -0.5 * a.t())

    with ThreadPoolExecutor(6) as pool:
        assert all(pool.map(job, range(24)))
    assert lib.t11_raii_scope(1) == 1 and lib.t11_raii_scope(0) == 0
    assert lib.t11_live_buffers() == 0


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA build compiles without a GPU)")
def test_the_two_builds_do_not_share_a_launcher():
    """Both builds in one process (as on a GPU run): the launcher is a static local of an inline function, which
    g++ makes a GNU unique symbol, shared by every library that defines the same name, RTLD_LOCAL or not. Each
    build has its own inline namespace, so the CUDA build's launcher starts empty instead of handing out the C++
    build's host-code plans (which would run host loops over device pointers)."""
    import subprocess

    from demos.t11_gpu import _cpp

    cpu_path, cuda_path = _cpp.build_cpu_library(), _cpp.build_cuda_library()
    names = {path: subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True,
                                  check=True).stdout for path in (cpu_path, cuda_path)}
    unique = {path: {line.split()[-1] for line in out.splitlines() if " u " in line} for path, out in names.items()}
    assert not unique[cpu_path] & unique[cuda_path], unique
    code = ("import sys, torch; from demos.t11_gpu import _cpp; cpu = _cpp.load(sys.argv[1]); "
            "a = torch.randn(5, 7); out = torch.empty(7, 5); "
            "assert cpu.t11_scale_transpose(0, 8, a.data_ptr(), out.data_ptr(), 5, 7, 1.0) == 0; "
            "cuda = _cpp.load(sys.argv[2]); print(cpu.t11_plans_built(), cuda.t11_plans_built())")
    from records.paths import REPO_ROOT

    proc = subprocess.run([sys.executable, "-c", code, str(cpu_path), str(cuda_path)], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["1", "0"], proc.stdout + proc.stderr
