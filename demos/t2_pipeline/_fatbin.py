"""Plumbing for lower_irs.py's fat-binary section: nvcc builds one small CUDA C++ kernel into a fatbin holding SASS
for two real architectures and PTX for a virtual one; cuobjdump lists the entries and extracts each. Static analysis:
nothing here needs a GPU. As in demos/t11_gpu/_cuda.py, the CUDA source is kept here as a string (so the demo's
source digest covers it) and nvcc comes from PATH; cuobjdump comes from Triton's bundle, else PATH."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

KERNEL_CU = r"""
// y = a * x + y, one element per thread.
extern "C" __global__ void axpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

# nvcc's -gencode pairs (virtual architecture, what to embed): SASS for sm_80 and for sm_90, each compiled from that
# architecture's PTX, and the compute_90 PTX itself, which the driver can compile for GPUs newer than both.
GENCODE = (("compute_80", "sm_80"), ("compute_90", "sm_90"), ("compute_90", "compute_90"))


@dataclass
class Entry:
    kind: str  # "ELF" (a cubin: SASS for one real architecture) or "PTX"
    arch: str  # the architecture cuobjdump names: sm_80, sm_90 (for PTX: the virtual architecture's number)
    bytes: int  # the extracted file's size (PTX uncompressed)
    text: str  # the SASS listing (ELF) or the PTX source


@dataclass
class Fatbin:
    nvcc_release: str  # "release 13.0, V13.0.88"
    bytes: int  # the .fatbin file
    listing: str  # cuobjdump --list-elf --list-ptx
    entries: list[Entry]


def _run(cmd: list, cwd: Path | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(str(cmd[0])).name} failed: {(proc.stderr or proc.stdout).strip()[:300]}")
    return proc.stdout


def build(cuobjdump: Path | None) -> Fatbin:
    """nvcc --fatbin for GENCODE, then cuobjdump's list of entries and each entry extracted."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH")
    if cuobjdump is None:
        raise FileNotFoundError("cuobjdump not found (neither in Triton's bundle nor on PATH)")
    release = next((line.split("release", 1)[1].strip() for line in _run([nvcc, "--version"]).splitlines()
                    if "release" in line), "unknown")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "axpy.cu").write_text(KERNEL_CU)
        _run([nvcc, "--fatbin", "-o", "axpy.fatbin", *[f"-gencode=arch={v},code={c}" for v, c in GENCODE], "axpy.cu"],
             cwd=tmp)
        listing = _run([cuobjdump, "--list-elf", "--list-ptx", "axpy.fatbin"], cwd=tmp)
        _run([cuobjdump, "-xelf", "all", "axpy.fatbin"], cwd=tmp)
        _run([cuobjdump, "-xptx", "all", "axpy.fatbin"], cwd=tmp)
        entries = []
        for kind, name in re.findall(r"^(ELF|PTX) file\s+\d+:\s+(\S+)", listing, re.M):
            path = tmp / name
            arch = re.search(r"\.(sm_\d+a?)\.(?:cubin|ptx)$", name).group(1)
            text = _run([cuobjdump, "-sass", path]) if kind == "ELF" else path.read_text()
            entries.append(Entry(kind, arch, path.stat().st_size, text))
        return Fatbin(release, (tmp / "axpy.fatbin").stat().st_size, listing.strip(), entries)


def ptx_isa(ptx: str) -> float | None:
    """The PTX ISA version a PTX file declares (`.version 9.0`): the oldest driver that can JIT it is the one
    released with the toolkit that introduced that ISA version."""
    m = re.search(r"^\s*\.version\s+(\d+\.\d+)", ptx, re.M)
    return float(m.group(1)) if m else None


def capability(arch: str) -> tuple[int, int]:
    """'sm_90' -> (9, 0); 'sm_120' -> (12, 0)."""
    digits = re.search(r"(\d+)", arch).group(1)
    return int(digits[:-1]), int(digits[-1])


def loaded_by(entries: list[Entry], cc: tuple[int, int]) -> str:
    """Which entry a GPU of compute capability cc would run, by the rules of the CUDA C++ Programming Guide
    (binary compatibility, PTX compatibility): SASS for X.y runs on X.z with z >= y, never across a major
    version; PTX for X.y can be JIT-compiled for any capability >= X.y. SASS is preferred when both fit.
    The rule, applied to this fatbin's entries; nothing is loaded."""
    sass = [e for e in entries if e.kind == "ELF" and capability(e.arch)[0] == cc[0] and capability(e.arch) <= cc]
    if sass:
        best = max(sass, key=lambda e: capability(e.arch))
        exact = capability(best.arch) == cc
        return f"SASS {best.arch}" + ("" if exact else " (binary compatible: same major, older minor)")
    ptx = [e for e in entries if e.kind == "PTX" and capability(e.arch) <= cc]
    if ptx:
        best = max(ptx, key=lambda e: capability(e.arch))
        return f"PTX compute_{best.arch.removeprefix('sm_')}, JIT-compiled by the driver at load (then cached)"
    return "nothing: no kernel image for this device"
