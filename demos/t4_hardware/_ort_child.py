"""Run in a fresh process: load one ONNX file into an ONNX Runtime CPU session, run one batch, and print
the process's resident memory before loading and its peak after (bytes, JSON on stdout).

A fresh process per file, so each peak is that file's alone: ONNX Runtime keeps arenas and a process
never gives its peak back.
"""

import json
import sys

import numpy as np
import onnxruntime as ort

from demos.harness.threads import onnxruntime_options


def status_bytes(field: str) -> int:
    """VmRSS (resident now) or VmHWM (peak resident) from /proc/self/status. VmHWM belongs to this program's
    address space, unlike getrusage's ru_maxrss, which Linux carries over from the parent across fork+exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # kB
    raise RuntimeError(f"{field} not in /proc/self/status")


if __name__ == "__main__":
    path, batch, width, threads, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    x = np.random.default_rng(0).standard_normal((batch, width)).astype(dtype)
    before = status_bytes("VmRSS")
    options = onnxruntime_options(ort, threads)
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    session.run(None, {"x": x})
    peak = status_bytes("VmHWM")
    print(json.dumps({"before": before, "peak": peak}))
