"""The occupancy demo and its calculator: the formula against cases worked by hand and against the
rules it encodes (monotone in registers and shared memory, never above 100%), ptxas's report parsed,
and the tiny run's sweep."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import checks_by_name, demo_record, metric
from demos.t11_gpu import _cuda

NVCC = shutil.which("nvcc") is not None
tiny_record = demo_record("demos.t11_gpu.occupancy")


@pytest.mark.parametrize(("threads", "regs", "smem", "occupancy", "limiter"), [
    (256, 32, 0, 1.0, "warps"),           # 8 blocks x 8 warps
    (1024, 33, 0, 0.5, "registers"),      # 1280 registers per warp: 12 warps per sub-partition, 48 per SM
    (128, 32, 48 * 1024, 0.25, "shared memory"),  # (48 KB + 1 KB reserved) fits 4 times in 228 KB
    (32, 16, 0, 0.5, "blocks"),           # 32 blocks of one warp
    (256, 64, 0, 0.5, "registers"),       # 2048 registers per warp: 8 per sub-partition, 32 per SM, 4 blocks
    (256, 128, 0, 0.25, "registers"),
    (256, 255, 0, 0.125, "registers"),    # 8192 per warp: 2 per sub-partition, 8 per SM: one block
    (64, 32, 100 * 1024, 0.0625, "shared memory"),  # the starved ncu point: 2 blocks of 2 warps
])
def test_the_formula_matches_hand_worked_cases(threads, regs, smem, occupancy, limiter):
    got = _cuda.occupancy(threads, regs, smem)
    assert got["occupancy"] == occupancy and got["limiter"] == limiter, got


def test_impossible_launches_have_zero_occupancy():
    assert _cuda.occupancy(1024, 65, 0)["blocks_per_sm"] == 0  # 1024 x 65 registers exceed 64K per block
    assert _cuda.occupancy(128, 32, 228 * 1024)["blocks_per_sm"] == 0  # above the 227 KB per-block opt-in limit
    with pytest.raises(ValueError):
        _cuda.occupancy(2048, 32, 0)


@given(st.integers(1, 1024), st.integers(1, 254), st.integers(0, 200 * 1024))
def test_occupancy_never_rises_with_more_registers_or_shared_memory(threads, regs, smem):
    base = _cuda.occupancy(threads, regs, smem)
    assert 0 <= base["occupancy"] <= 1
    assert _cuda.occupancy(threads, regs + 1, smem)["occupancy"] <= base["occupancy"]
    assert _cuda.occupancy(threads, regs, smem + 4096)["occupancy"] <= base["occupancy"]
    assert base["active_warps"] <= 64 and base["blocks_per_sm"] <= 32


def test_ptxas_report_parser():
    report = """ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
    16 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 4224 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Used 40 registers, used 0 barriers, 372 bytes cmem[0]
"""
    usage = _cuda.ptxas_usage(report)
    assert usage["k1"] == {"registers": 24, "smem_bytes": 4224, "spill_store_bytes": 12, "spill_load_bytes": 8}
    assert usage["k2"]["registers"] == 40 and usage["k2"]["smem_bytes"] == 0


@pytest.mark.slow
def test_the_sweep_is_computed_from_ptxas(tiny_record):
    checks = checks_by_name(tiny_record)
    formula = [c for name, c in checks.items() if name.startswith("formula.")]
    assert len(formula) == 4
    for c in formula:  # "<occupancy> limited by <what> (worked by hand: <occupancy>, <what>)"
        computed, by_hand = c["detail"].removesuffix(")").split(" (worked by hand: ")
        assert computed.split(" limited by ") == by_hand.split(", "), c
    if not NVCC:
        pytest.skip("nvcc is not on PATH: the sweep is recorded as not run")
    regs = metric(tiny_record, "ptxas.chase.registers")
    table = next(t for t in tiny_record["tables"] if t["name"] == "theory")
    for row in table["rows"]:
        _, kernel, _, threads, r, smem_kb, _, blocks, _, occ, _ = row
        assert blocks == _cuda.occupancy(threads, r, smem_kb * 1024)["blocks_per_sm"]
    assert 16 <= regs <= 255
    assert metric(tiny_record, "ptxas.chase.cap24.spill_bytes") > 0  # 24 registers cannot hold 16 live chains
    assert metric(tiny_record, "theory.stream_scale.shared_memory.100") == 25.0
    assert {n["variant"] for n in tiny_record["not_run"]} >= {"Nsight Compute (ncu) at two sweep points"}
    assert tiny_record["artifacts"]["ncu_command"].startswith("ncu --clock-control none --kernel-name stream_scale")


def test_a_profiler_that_hangs_or_fails_becomes_one_line():
    """ncu and compute-sanitizer can hang or be refused by the driver (a gVisor sandbox): the demos turn that
    into a 'not run' line with the tool's own words, never a crash or a wait without end."""
    proc, why = _cuda.run_tool(["sleep", "5"], timeout_s=0.5)
    assert proc is None and "did not finish within" in why
    proc, why = _cuda.run_tool(["/nonexistent/ncu"], timeout_s=5)
    assert proc is None and "could not start" in why
    proc, why = _cuda.run_tool(["sh", "-c", "echo '==PROF== Connected'; echo '==ERROR== Failed to initialize the "
                                            "profiler: LibraryNotLoaded' >&2; exit 1"], timeout_s=5)
    assert why is None and proc.returncode == 1
    assert _cuda.tool_error(proc) == "ERROR: Failed to initialize the profiler: LibraryNotLoaded"
    assert _cuda.find_tool("sh") is not None and _cuda.find_tool("surely-not-a-cuda-tool") is None
    proc, _ = _cuda.run_tool(["sh", "-c", "echo '========= Error: Device not supported'; exit 3"], timeout_s=5)
    assert _cuda.tool_error(proc) == "Error: Device not supported"
    proc, _ = _cuda.run_tool(["sh", "-c", "echo '========= Error: Device not supported'; echo 'ran: 0'; "
                                          "echo '========= ERROR SUMMARY: 1 error'"], timeout_s=5)
    assert _cuda.tool_error(proc) == "Error: Device not supported"
