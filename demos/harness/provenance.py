"""Where a number came from: machine, versions, git state, time."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

from records.paths import REPO_ROOT

PACKAGES = ("torch", "triton", "jax", "jaxlib", "onnx", "onnxruntime", "numpy")


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


COMMIT_ENV = "MM_SOURCE_COMMIT"  # set by the GPU campaign: the machine it runs on gets a copy without .git


MEASURING_HARNESS = "demos/harness"  # how every demo measures: its changes count as changes of the measured code


def git_state(measured_files: list[str] = ()) -> dict:
    """Commit, and whether the measured code differed from it (``dirty``): the record's measuring code (its
    source files) and the harness, compared with that commit. Other uncommitted files (a page being edited,
    another demo, the records a regeneration rewrites) do not make a record's numbers differ, so they do not
    count. A copy of the tree without .git (what a lent GPU machine gets) takes the commit from
    MM_SOURCE_COMMIT, and its dirty flag is unknown (null)."""
    top = _git("rev-parse", "--show-toplevel")
    commit = _git("rev-parse", "HEAD") if top and os.path.samefile(top, REPO_ROOT) else None
    if commit is None:
        return {"commit": os.environ.get(COMMIT_ENV) or None, "dirty": None, "commit_from": "environment"}
    status = _git("status", "--porcelain", "--", *measured_files, MEASURING_HARNESS)
    return {"commit": commit, "dirty": None if status is None else bool(status), "commit_from": "git",
            "dirty_means": "the measuring code (source_files) or the harness differed from this commit"}


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: /proc), so a record can say how long the interpreter
    and the imports took before the demo's first line of work; None where /proc is not there."""
    try:
        stat = Path("/proc/self/stat").read_text()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the command name
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        return max(uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The instruction-set extensions that decide which CPU kernels run. The same "AMD EPYC" VM of this project ran on
# hosts with and without AVX-512 BF16: its bf16 matmul ceiling measured 0.38 TFLOP/s on one and 0.0013 (emulated)
# on the other, and a bf16 GEMV went from flat in the row count to linear in it.
CPU_ISA = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16",
           "amx_int8", "asimd", "sve", "bf16", "i8mm")


def cpu_isa() -> list[str] | None:
    """Which of CPU_ISA the CPU reports (Linux /proc/cpuinfo flags or arm64 Features), or None where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    have = set(line.split(":", 1)[1].split())
                    return [x for x in CPU_ISA if x in have]
    except OSError:
        pass
    return None


def cpu_llc_bytes() -> int | None:
    """Size of the CPU's last-level cache (Linux sysfs), or None where it cannot be read."""
    import glob

    best = None
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            level = int(open(f"{index}/level").read())
            size = open(f"{index}/size").read().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        value = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        if best is None or level > best[0]:
            best = (level, value)
    return best[1] if best else None


def nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def collect(device, torch_module, timing_threads: int, measured_files: list[str] = ()) -> dict:
    """Provenance of a run on ``device``; torch is passed in so this module stays import-light.
    ``timing_threads``: the CPU thread count the run's timings used (the harness knows it);
    ``measured_files``: the record's measuring code (repository paths), whose state ``dirty`` reports."""
    info = {
        "device_name": device.name,
        "device_class": device.device_class,
        "device_kind": device.kind,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_llc_mib": (cpu_llc_bytes() or 0) / 2**20 or None,
        "cpu_isa": cpu_isa(),
        "torch_threads": timing_threads,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "packages": package_versions(),
        "cuda": torch_module.version.cuda,
        "driver": nvidia_driver() if device.is_gpu else None,
        "utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **git_state(measured_files),
    }
    if device.is_gpu:
        props = torch_module.cuda.get_device_properties(0)
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["sm_count"] = props.multi_processor_count
        info["l2_mib"] = round(device.l2_bytes / 2**20, 1)
    return info
