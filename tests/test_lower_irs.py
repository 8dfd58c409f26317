"""The lower-IR demo at the tiny size: the bias + GELU Triton kernel is correct (interpreted), compiles
ahead of time for sm_90 on a machine without a GPU, and each stage shows what it should (no layout in
TTIR, a blocked layout in TTGIR, 128-bit accesses in PTX and SASS, no spills); the runtime part records
the CUDA-only variants as not run, with reasons."""

from __future__ import annotations

import os

import pytest

from conftest import demo_record
from demos.t2_pipeline import _lowering as low

pytestmark = pytest.mark.slow

tiny = demo_record("demos.t2_pipeline.lower_irs",
                   env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})


def test_kernels_correct_and_both_orders_read_the_same_sum(tiny):
    checks = {c["name"]: c for c in tiny["checks"]}
    for name in ("triton.bias_gelu", "inductor.bias_gelu"):
        assert checks[name]["max_abs_err"] <= checks[name]["atol"], checks[name]
    first, second = checks["sync.same_value"]["detail"].rsplit("(", 1)[1].rstrip(")").split(", ")
    assert first == second, checks["sync.same_value"]


def test_the_stages_get_lower_and_longer(tiny):
    m = {k: v["value"] for k, v in tiny["metrics"].items()}
    if "ttir.lines" not in m:
        pytest.skip("this Triton build cannot compile for CUDA: " + str(tiny["not_run"]))
    assert m["ttir.lines"] < m["llir.lines"] and m["ttgir.lines"] < m["ptx.lines"]
    assert "blocked<" in tiny["artifacts"]["ttgir"] and "blocked<" not in tiny["artifacts"]["ttir"]
    assert m["ptx.vector_memory_ops"] >= 3  # x and bias loaded, y stored, 128 bits at a time
    assert m["sass.wide_loads"] >= 2 and m["sass.spills"] == 0
    assert 0 < m["sass.registers"] <= 255
    assert "LDG.E.128" in tiny["artifacts"]["sass"]


def test_cuda_runtime_parts_not_run_on_cpu(tiny):
    variants = {n["variant"] for n in tiny["not_run"]}
    assert {"CUDA caching allocator (torch.cuda.memory_stats)", "side stream + event"} <= variants
    assert all(n["reason"].startswith("no GPU") for n in tiny["not_run"] if "CUDA" in n["variant"] or "stream" in n["variant"])


def test_sass_parsing_and_opcodes():
    listing = ("        /*0080*/              @!P0 LDG.E.128 R4, desc[UR8][R16.64] ;      /* 0x0000000810048981 */\n"
               "        /*0090*/                   FFMA R1, R2, R3, R4 ;                   /* 0x0000000000000000 */\n"
               "                                                                           /* 0x000fe20000000000 */\n")
    instructions = low.sass_instructions(listing)
    assert instructions == ["@!P0 LDG.E.128 R4, desc[UR8][R16.64]", "FFMA R1, R2, R3, R4"]
    assert low.opcode_counts(instructions) == {"LDG.E.128": 1, "FFMA": 1}
    assert low.registers("Function k:\n REG:40 STACK:0") == 40


def test_locations_are_stripped():
    mlir = '#loc = loc("/home/x/file.py":3:1)\n  %0 = tt.load %p, %m : tensor<4xf32> loc(#loc3)\n  tt.return loc("x"(#loc))'
    out = low.without_locations(mlir)
    assert "loc" not in out and "/home/x" not in out and "tt.load %p, %m : tensor<4xf32>" in out


def test_notebook_cells_are_top_level():
    """Every cell of the demo's notebook starts at column 0 (a cell marker inside an indented block
    would split that block across cells and the notebook would not run)."""
    import jupytext

    from conftest import REPO

    for demo in ("demos/t2_pipeline/lower_irs.py", "demos/t3_compiler/matmul_epilogue.py",
                 "demos/t3_compiler/graph_passes.py"):
        cells = jupytext.read(REPO / demo).cells
        assert cells and not [c.source[:40] for c in cells if c.source[:1].isspace()], demo


def test_fatbin_holds_two_sass_images_and_one_ptx(tiny):
    m = {k: v["value"] for k, v in tiny["metrics"].items()}
    if "fatbin.bytes" not in m:
        pytest.skip("no nvcc here: " + str(tiny["not_run"]))
    assert {c["name"] for c in tiny["checks"]} >= {"fatbin.entries", "fatbin.ptx_target", "fatbin.ptx_isa"}
    assert m["fatbin.sass_sm_80.bytes"] > 0 and m["fatbin.sass_sm_90.bytes"] > 0 and m["fatbin.ptx.bytes"] > 0
    assert m["fatbin.sass_sm_80.instructions"] > 5 and m["fatbin.sass_sm_90.instructions"] > 5
    assert all(v["origin"] == "static" for k, v in tiny["metrics"].items() if k.startswith("fatbin."))
    loads = dict(next(t for t in tiny["tables"] if t["name"] == "fatbin_loader")["rows"])
    assert loads["A10 (8.6)"].startswith("SASS sm_80") and loads["H100, H200 (9.0)"] == "SASS sm_90"
    assert loads["B200 (10.0)"].startswith("PTX compute_90") and loads["T4 (7.5)"].startswith("nothing")


def test_loader_rule():
    from demos.t2_pipeline import _fatbin as fb

    entries = [fb.Entry("ELF", "sm_80", 1, ""), fb.Entry("ELF", "sm_90", 1, ""), fb.Entry("PTX", "sm_90", 1, "")]
    assert fb.loaded_by(entries, (8, 9)).startswith("SASS sm_80")  # same major, older minor
    assert fb.loaded_by(entries, (9, 0)) == "SASS sm_90"
    assert fb.loaded_by(entries, (12, 0)).startswith("PTX compute_90")  # newer major: only the PTX fits
    assert fb.loaded_by(entries[:2], (10, 0)).startswith("nothing")  # no PTX, no SASS of major 10
    assert fb.capability("sm_120") == (12, 0) and fb.ptx_isa(".version 9.0\n.target sm_90") == 9.0
