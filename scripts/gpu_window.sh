#!/usr/bin/env bash
# One GPU window as one command on a lent GPU machine (docs/contributing.md, "GPU records"):
#   OUT=folder bash scripts/gpu_window.sh COMMIT_SHA [BUDGET_MIN]
# The machine has PyTorch, Triton, JAX, ONNX Runtime and CuPy but not jsonschema, which writing a record needs:
# `make gpu-wheels` puts it and its dependencies in .cache/wheels here, the call carries that folder, and this
# installs them into /tmp/site (the machine's own packages untouched). Then the campaign runs into $OUT: the
# preflight stops within seconds if a required package is still missing.
set -u
sha=${1:?usage: OUT=folder bash scripts/gpu_window.sh COMMIT_SHA [BUDGET_MIN]}
budget=${2:-8.5}
out=${OUT:?set OUT to the folder whose files come back}
if compgen -G ".cache/wheels/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .cache/wheels/*.whl \
    || { echo "gpu_window: the carried wheels did not install" >&2; exit 2; }
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
PYTHONUNBUFFERED=1 exec python3 -m scripts.gpu_campaign --out "$out" --budget-min "$budget" --commit "$sha"
