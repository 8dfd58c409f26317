#!/usr/bin/env bash
# One GPU window as one command on a lent GPU machine (docs/contributing.md, "GPU records"):
#   OUT=folder bash scripts/gpu_window.sh COMMIT_SHA [BUDGET_MIN]
# The machine has PyTorch, Triton, JAX, ONNX Runtime and CuPy but not jsonschema, which writing a record needs:
# `make gpu-wheels` puts it and its dependencies in .cache/wheels here, the call carries that folder, and this
# unpacks them into /tmp/site (no pip needed; the machine's own packages untouched). Then the campaign runs into $OUT: the
# preflight stops within seconds if a required package is still missing.
set -u
sha=${1:?usage: OUT=folder bash scripts/gpu_window.sh COMMIT_SHA [BUDGET_MIN]}
budget=${2:-8.5}
out=${OUT:?set OUT to the folder whose files come back}
if compgen -G ".cache/wheels/*.whl" > /dev/null; then
  # A wheel is a zip of what site-packages holds: unpack (no pip) each one whose distribution the machine lacks.
  python3 - <<'PY' || { echo "gpu_window: the carried wheels did not unpack" >&2; exit 2; }
import glob, importlib.metadata as md, zipfile
for wheel in sorted(glob.glob(".cache/wheels/*.whl")):
    dist = wheel.split("/")[-1].split("-")[0]
    try:
        md.version(dist)
    except md.PackageNotFoundError:
        zipfile.ZipFile(wheel).extractall("/tmp/site")
        print("gpu_window: unpacked", wheel.split("/")[-1])
PY
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
PYTHONUNBUFFERED=1 exec python3 -m scripts.gpu_campaign --out "$out" --budget-min "$budget" --commit "$sha"
