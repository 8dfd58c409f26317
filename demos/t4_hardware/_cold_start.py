"""Run in a fresh process: the MLP of the T4 demos, started one of three ways, run once, output checked.

    python -m demos.t4_hardware._cold_start MODE SIZE DEVICE [PACKAGE]

MODE eager: build the model and call it. aoti: load an AOTInductor package (compiled ahead of time by
aot_vs_jit.py) and call it. jit: torch.compile the model and call it (trace and compile happen here, in
this process, with an empty compile cache). Each mode checks its output against eager PyTorch in the
same process and exits non-zero if they differ, so a cold start is only counted when it computed the
right thing. Nothing is timed here: the parent times the whole process (interpreter start included).
"""

import sys

import torch

from demos.t4_hardware._model import MLP_SIZES, make_mlp

if __name__ == "__main__":
    mode, size, device = sys.argv[1], sys.argv[2], sys.argv[3]
    shape = MLP_SIZES[size]
    model = make_mlp(shape).to(device)
    x = torch.randn(8, shape[0], generator=torch.Generator().manual_seed(3)).to(device)
    with torch.inference_mode():
        if mode == "eager":
            y = model(x)
        elif mode == "aoti":
            y = torch._inductor.aoti_load_package(sys.argv[4])(x)
        elif mode == "jit":
            y = torch.compile(model)(x)
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        if device == "cuda":
            torch.cuda.synchronize()
        ref = model(x)
    err = float((y - ref).abs().max())
    print(f"max_abs_err {err:.3e}")
    sys.exit(0 if err <= 1e-3 * float(ref.abs().max()) + 1e-4 else 1)
