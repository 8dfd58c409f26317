# %% [markdown]
# # Below the graph: one fused kernel through Triton's IRs to SASS, and the runtime around it
#
# The graph-level stages (Dynamo, AOTAutograd, Inductor's scheduling) end with code: a Triton kernel on a
# GPU, C++ on a CPU. Triton then lowers that kernel through four more representations before the GPU
# runs anything:
#
# - **TTIR** (Triton IR, an MLIR dialect): whole-tile operations (`tt.load` of a 1024-element tensor of
#   pointers, `math.erf` on a tile), no threads yet.
# - **TTGIR** (Triton GPU IR): the same ops with a *layout* attached to every tensor, which says which
#   thread holds which elements (`sizePerThread = [8]`: eight consecutive bf16 values per thread, one
#   128-bit access).
# - **LLVM IR**: per-thread scalar code, with the erf expanded into its polynomial.
# - **PTX**: NVIDIA's virtual ISA, from LLVM's NVPTX back end; **SASS**: the machine code `ptxas`
#   makes for one architecture (here sm_90, the H100 and H200), with registers allocated.
#
# None of this needs a GPU: Triton's front end, its MLIR passes, LLVM and the `ptxas` that ships with
# Triton all run on the host, so the demo compiles the kernel ahead of time for sm_90 on any machine and
# disassembles the result with `cuobjdump`. What needs a GPU is *running* it; without one, the same
# kernel runs in Triton's interpreter for the correctness check. The second half shows the runtime that
# launches such kernels: the allocator, a side stream joined by an event, and the sync that `.item()`
# forces.

# %%
import numpy as np
import torch
import torch.nn.functional as F

from demos.harness.run import start
from demos.t2_pipeline import _lowering as low

run = start("lower_irs", title="One fused kernel through TTIR, TTGIR, LLVM IR, PTX and SASS; allocator, "
            "streams and syncs", sizes={"tiny": (8, 1000, 128), "small": (64, 1000, 256), "full": (4096, 1000, 4096)},
            cpu_threads=1)
rows, cols, n = run.sizes  # the bias + GELU check shape (rows x cols); n: the square matmuls of the runtime part
device = run.torch_device
dtype = torch.bfloat16 if run.device.is_gpu else torch.float32
ARCH, BLOCK, WARPS = 90, 1024, 4  # compile target: sm_90 (H100/H200); one 1024-wide row per program

# Imported after start(): without a GPU, start() has switched Triton to its interpreter.
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# %% [markdown]
# ## 1. The kernel: bias + exact GELU, one row per program
#
# The same fusion as the kernel-fusion page, written as Inductor would write it for a GPU: load a row
# of x and the bias, compute in fp32, store once. It is checked against a float64 reference first
# (compiled on a GPU, interpreted without one).

# %%
@triton.jit
def bias_gelu_kernel(x_ptr, b_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    h = x.to(tl.float32) + b.to(tl.float32)
    y = 0.5 * h * (1.0 + tl.erf(h * 0.7071067811865476))
    tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


x = torch.randn(rows, cols, device=device, dtype=dtype)
bias = torch.randn(cols, device=device, dtype=dtype)
y = torch.empty_like(x)
bias_gelu_kernel[(rows,)](x, bias, y, cols, BLOCK=BLOCK, num_warps=WARPS)
reference = F.gelu(x.double() + bias.double())
tolerance = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
run.check_close("triton.bias_gelu", y, reference, **tolerance,
                reference_name="float64 bias + exact GELU")

# %% [markdown]
# ## 2. Compiled ahead of time for sm_90: the four IRs and the cubin
#
# `triton.compile` takes the kernel's source, the argument types (`*bf16` pointers, an `i32`), the
# compile-time constants and the target. The launcher on a GPU would also mark pointers to
# 16-byte-aligned tensors as such (`tt.divisibility = 16`); passing the same hint here is what lets the
# compiler use 128-bit loads. Source locations (file paths) are stripped from the dumps below.

# %%
signature = {"x_ptr": "*bf16", "b_ptr": "*bf16", "y_ptr": "*bf16", "n_cols": "i32"}
try:
    compiled, compile_s = run.first_call(lambda: low.aot_compile(
        bias_gelu_kernel, signature, {"BLOCK": BLOCK}, aligned=[0, 1, 2, 3], arch=ARCH, num_warps=WARPS))
except Exception as err:  # a Triton build without the NVIDIA back end or its ptxas
    compiled = None
    run.not_run("Triton ahead-of-time compile for sm_90", f"{type(err).__name__}: {str(err).splitlines()[0][:200]}")

if compiled is not None:
    run.metric("aot.compile_s", compile_s, "s", label="Triton compile for sm_90, source to cubin, on the host")
    ir = {stage: low.without_locations(compiled.asm[stage]) for stage in low.STAGES}
    for stage in low.STAGES:
        run.metric(f"{stage}.lines", len(ir[stage].splitlines()), "lines", label=f"{stage.upper()} (locations stripped)", origin="static")
    run.check("ptx.target", f".target sm_{ARCH}" in ir["ptx"], f"PTX targets sm_{ARCH}a or sm_{ARCH}")
    layout = next((line for line in ir["ttgir"].splitlines() if "blocked<" in line), "")
    run.check("ttgir.layout", bool(layout), layout or "no blocked layout in the TTGIR")
    run.check("ttir.no_layout", "blocked<" not in ir["ttir"], "TTIR has no thread layout; TTGIR adds it")
    run.artifact("ttir", low.excerpt(ir["ttir"], 45))
    run.artifact("ttgir", low.excerpt(ir["ttgir"], 25))
    fma_calls = ir["llir"].count("@llvm.nvvm.fma.")
    run.metric("llir.fma_calls", fma_calls, "calls",
               label="LLVM IR calls to FMA intrinsics (the erf polynomial; ftz and non-ftz variants, one kept)", origin="static")
    run.artifact("llir", low.grep(ir["llir"], r"^define|sreg|ld\.global|st\.global|ret void", 12,
                                  f"; LLVM IR, {len(ir['llir'].splitlines())} lines, per thread: the entry, the thread "
                                  f"and block ids, the 128-bit loads and store (inline PTX); {fma_calls} FMA intrinsic "
                                  "calls in between are the erf polynomial, for 8 elements per thread"))
    ptx_mem = [line for line in ir["ptx"].splitlines() if "ld.global" in line or "st.global" in line]
    run.metric("ptx.vector_memory_ops", sum(".v4" in line for line in ptx_mem), "instructions",
               label="PTX global loads/stores of 4 x 32 bits", origin="static")
    run.artifact("ptx", low.excerpt(ir["ptx"], 30) + "\n\n" +
                 low.grep(ir["ptx"], r"ld\.global|st\.global|ex2|cvt\.rn\.bf16", 14, "// global memory and conversions:"))

# %% [markdown]
# ### SASS: the machine code, from the cubin
#
# `ptxas` (bundled with Triton) already turned the PTX into a cubin; `cuobjdump` lists its SASS and
# resource usage. The opcode counts show the vector width (`LDG.E.128`), the erf polynomial as fused
# multiply-adds, and whether any register spilled to local memory (`LDL`/`STL`).

# %%
sass = None
if compiled is not None:
    try:
        sass, usage = low.disassemble(compiled.asm["cubin"])
    except Exception as err:
        run.not_run("SASS (cuobjdump)", f"{type(err).__name__}: {str(err).splitlines()[0][:200]}")
if sass is not None:
    instructions = low.sass_instructions(sass)
    counts = low.opcode_counts(instructions)
    run.check("sass.parsed", len(instructions) > 20 and any(o.startswith("STG") for o in counts),
              f"{len(instructions)} instructions, stores: {[o for o in counts if o.startswith('STG')]}")
    run.metric("sass.instructions", len(instructions), "instructions", label="SASS instructions (sm_90)", origin="static")
    regs = low.registers(usage)
    if regs is not None:
        run.metric("sass.registers", regs, "registers", label="registers per thread (ptxas)", origin="static")
    run.metric("sass.spills", sum(n for o, n in counts.items() if o.startswith(("LDL", "STL"))), "instructions",
               label="local-memory loads/stores (register spills)", origin="static")
    run.metric("sass.wide_loads", sum(n for o, n in counts.items() if o.startswith("LDG") and o.endswith(".128")),
               "instructions", label="128-bit global loads (LDG.E.128)", origin="static")
    run.table("sass_opcodes", "SASS opcodes of the bias + GELU kernel (sm_90), most frequent first",
              ["opcode", "count"], [[o, c] for o, c in counts.most_common(16)])
    body = [i for i in instructions if not i.startswith("NOP")]
    run.artifact("sass", f"// {len(instructions)} instructions; {usage.strip().splitlines()[-1].strip()}\n"
                 + low.excerpt("\n".join(body), 40))

# %% [markdown]
# ### What ships: a fat binary with SASS for each target and PTX for the rest
#
# A CUDA library ships its kernels as a *fatbin*: a cubin (SASS) for each real architecture it was built for,
# and usually the PTX of one virtual architecture. At load time the driver takes SASS built for the GPU's major
# version and a minor version no newer than the GPU's; failing that it JIT-compiles the PTX, if the GPU is at
# least that PTX's architecture, and caches the result on disk. Here `nvcc` builds a small kernel (`axpy`) with
# `-gencode` for sm_80 and sm_90 SASS and compute_90 PTX, and `cuobjdump` lists and extracts what the fatbin holds.
# Static analysis: nothing runs, and the table of which entry each GPU would load applies the CUDA Programming
# Guide's compatibility rules to these entries.

# %%
from demos.t2_pipeline import _fatbin as fb  # noqa: E402


def body_of(entry):
    """A cubin entry's SASS instructions, NOP padding left out."""
    return [i for i in low.sass_instructions(entry.text) if not i.startswith("NOP")]


try:
    fat = fb.build(low.triton_tool("cuobjdump"))
except Exception as err:  # no nvcc or cuobjdump on this machine
    fat = None
    run.not_run("nvcc fat binary (sm_80 and sm_90 SASS, compute_90 PTX)", f"{type(err).__name__}: {str(err)[:200]}")
if fat is not None:
    elves = [e for e in fat.entries if e.kind == "ELF"]
    ptx = [e for e in fat.entries if e.kind == "PTX"]
    run.check("fatbin.entries",
              sorted(e.arch for e in elves) == ["sm_80", "sm_90"] and [e.arch for e in ptx] == ["sm_90"],
              fat.listing.replace("\n", "; "))
    run.check("fatbin.ptx_target", ".target sm_90" in ptx[0].text and ".entry axpy" in ptx[0].text,
              "the PTX entry is axpy's PTX for compute_90")
    run.metric("fatbin.bytes", fat.bytes, "B", label=f"the fatbin (nvcc {fat.nvcc_release}), all entries",
               origin="static")
    for e in elves:
        run.metric(f"fatbin.sass_{e.arch}.bytes", e.bytes, "B", label=f"extracted: the {e.arch} cubin", origin="static")
        run.metric(f"fatbin.sass_{e.arch}.instructions", len(body_of(e)), "instructions",
                   label=f"axpy's SASS for {e.arch} (NOP padding left out)", origin="static")
    run.metric("fatbin.ptx.bytes", ptx[0].bytes, "B", label="extracted: the compute_90 PTX (text)", origin="static")
    isa = fb.ptx_isa(ptx[0].text)
    run.check("fatbin.ptx_isa", isa is not None, f"the PTX declares ISA version {isa}")
    run.metric("fatbin.ptx_isa", isa, "value", label="the PTX ISA version the PTX declares (.version)", origin="static")
    run.table("fatbin_entries", f"What the fatbin holds (cuobjdump --list-elf --list-ptx; nvcc {fat.nvcc_release})",
              ["entry", "architecture", "bytes (extracted)", "SASS instructions (no NOPs)"],
              [[e.kind, e.arch if e.kind == "ELF" else "compute_90", e.bytes,
                len(body_of(e)) if e.kind == "ELF" else "-"] for e in fat.entries])
    gpus = {"T4 (7.5)": (7, 5), "A100 (8.0)": (8, 0), "A10 (8.6)": (8, 6), "L4, L40S (8.9)": (8, 9),
            "H100, H200 (9.0)": (9, 0), "B200 (10.0)": (10, 0), "RTX PRO 6000 Blackwell (12.0)": (12, 0)}
    run.table("fatbin_loader", "Which entry each GPU would load, by the CUDA compatibility rules (computed, not run)",
              ["GPU (compute capability)", "loads"], [[g, fb.loaded_by(fat.entries, cc)] for g, cc in gpus.items()])
    run.artifact("fatbin", f"$ cuobjdump --list-elf --list-ptx axpy.fatbin\n{fat.listing}\n\n" + "\n\n".join(
        f"// SASS for {e.arch}:\n" + low.excerpt("\n".join(body_of(e)), 14) for e in elves)
        + "\n\n// PTX (compute_90):\n" + low.excerpt(low.without_locations(ptx[0].text), 30))

# %% [markdown]
# ### What the CPU back end emits for the same fusion
#
# Inductor lowers the same `gelu(x + b)` to C++ with vector intrinsics on a CPU (and to a Triton kernel
# like the one above on a GPU). Its C++ goes straight to the host compiler: no PTX or SASS level.

# %%
from torch._inductor.utils import run_and_get_code  # noqa: E402

compiled_fn = torch.compile(lambda t, b: F.gelu(t + b), dynamic=False)
with torch.no_grad():
    out, sources = run_and_get_code(compiled_fn, x, bias)
run.check_close("inductor.bias_gelu", out, reference, **tolerance, reference_name="float64 bias + exact GELU")
code = sources[0]
begin = code.find("async_compile.")
kernel_src = code[begin: code.find("'''", code.find("'''", begin) + 3) + 3]
run.metric("inductor.kernel_lines", len(kernel_src.splitlines()), "lines",
           label=f"Inductor's generated kernel for the same fusion ({'Triton' if run.device.is_gpu else 'C++'})")
run.artifact("inductor_kernel", low.excerpt(kernel_src, 60))

# %% [markdown]
# ## 3. The runtime: allocator, a side stream, and the sync `.item()` forces
#
# **Allocator.** On a GPU, PyTorch's caching allocator asks the driver for memory (`cudaMalloc`) once,
# keeps freed blocks in its pool, and serves the next request of a similar size from there;
# `torch.cuda.memory_stats` counts both. On a CPU there is no caching allocator: each tensor comes from
# the C library's `malloc` (this harness sets glibc's `mallopt` so freed memory stays in the process, which
# is a cache of a kind, but not PyTorch's).

# %%
alloc_bytes = 64 * 2**20
if run.device.is_gpu:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_stats()
    _, cold_s = run.first_call(lambda: torch.empty(alloc_bytes, dtype=torch.uint8, device=device).data_ptr())
    after_cold = torch.cuda.memory_stats()
    warm = run.time(lambda: torch.empty(alloc_bytes, dtype=torch.uint8, device=device).data_ptr(), flush=False)
    after = torch.cuda.memory_stats()
    keys = ["allocation.all.allocated", "segment.all.allocated", "reserved_bytes.all.current", "allocated_bytes.all.current"]
    run.table("memory_stats", "torch.cuda.memory_stats around a 64 MiB tensor: before, after the first "
              "(cold) allocation, after the timed repeats", ["counter", "before", "after first", "after repeats"],
              [[k, before.get(k, 0), after_cold.get(k, 0), after.get(k, 0)] for k in keys])
    new_allocs = after["allocation.all.allocated"] - after_cold["allocation.all.allocated"]
    new_segments = after["segment.all.allocated"] - after_cold["segment.all.allocated"]
    run.check("allocator.cached", new_allocs >= warm.repeats and new_segments <= 1,
              f"{new_allocs} allocations served with {new_segments} new driver segments")
    run.metric("gpu.alloc.cold_us", cold_s * 1e6, "us", label="first 64 MiB tensor after empty_cache (driver call)")
    run.metric("gpu.alloc.cached_us", warm.median_s * 1e6, "us", label="the same size again, from the cache")
else:
    run.not_run("CUDA caching allocator (torch.cuda.memory_stats)", "no GPU: the CPU allocator is the C "
                "library's malloc, which PyTorch does not count; the CPU timing below is that malloc")
    cpu_alloc = run.time(lambda: torch.empty(alloc_bytes, dtype=torch.uint8).data_ptr())
    run.metric("cpu.alloc_us", cpu_alloc.median_s * 1e6, "us", label="a 64 MiB CPU tensor (malloc, no first touch)")

# %% [markdown]
# **A side stream and an event.** Two independent chains of matmuls: on one stream they run one after
# the other; with the second chain on a side stream, the GPU may run both at once. The side stream must
# wait (an event) until its inputs are ready, the default stream must wait for the side stream's result
# before using it, and `record_stream` tells the allocator that a tensor made on the side stream is used
# on the default one (or its memory could be reused too early).

# %%
w = torch.randn(n, n, device=device, dtype=dtype) / n**0.5
inputs = [torch.randn(n, n, device=device, dtype=dtype) for _ in range(2)]


def chain(t, steps=4):
    for _ in range(steps):
        t = torch.tanh(t @ w)
    return t


with torch.no_grad():
    one_stream = lambda: chain(inputs[0]) + chain(inputs[1])  # noqa: E731
    expected = one_stream()
    if run.device.is_gpu:
        side = torch.cuda.Stream()

        def two_streams():
            ready = torch.cuda.Event()
            ready.record()  # the inputs were written on the default stream
            with torch.cuda.stream(side):
                side.wait_event(ready)
                second = chain(inputs[1])
                done = torch.cuda.Event()
                done.record(side)
            first = chain(inputs[0])
            torch.cuda.current_stream().wait_event(done)
            second.record_stream(torch.cuda.current_stream())
            return first + second

        run.check_close("streams.two_equal_one", two_streams(), expected, rtol=1e-2, atol=1e-2,
                        reference_name="the same chains on one stream")
        t_one, t_two = run.time(one_stream), run.time(two_streams)
        run.metric("streams.one_us", t_one.median_s * 1e6, "us", label="two matmul chains on one stream")
        run.metric("streams.two_us", t_two.median_s * 1e6, "us", label="the second chain on a side stream")
        run.metric("streams.speedup", t_one.median_s / t_two.median_s, "x", label="side stream over one stream")
    else:
        run.not_run("side stream + event", "no GPU: CPU tensors have no streams; each op runs to completion "
                    "in the calling thread before the next one starts")

# %% [markdown]
# **The sync `.item()` forces.** On a GPU, launching returns at once and the host can do its own work
# while the device computes; `.item()` blocks until the value exists. Reading it *before* the host work
# serializes the two; reading it *after* overlaps them. The host work (a NumPy sort) is sized to take
# about as long as the device work, so perfect overlap would halve the time. On a CPU device the "device
# work" runs in the calling thread before the call returns, so the order cannot matter.

# %%
host_data = np.random.default_rng(0).random(1 << 12)


def host_work(units):
    for _ in range(units):
        np.sort(host_data)


with torch.no_grad():
    t_device = run.time(lambda: chain(inputs[0]).sum().item())
    t_host = run.time(lambda: host_work(1))
    units = max(1, round(t_device.median_s / t_host.median_s))

    def read_then_host():
        value = chain(inputs[0]).sum().item()  # the host waits here for the device
        host_work(units)
        return value

    def host_then_read():
        pending = chain(inputs[0]).sum()  # queued; the host goes on
        host_work(units)
        return pending.item()

    first, second = read_then_host(), host_then_read()
    run.check("sync.same_value", abs(first - second) <= 1e-6 * max(1.0, abs(first)),
              f"both orders read the same sum ({first:.6g}, {second:.6g})")
    t_serial, t_overlap = run.time(read_then_host), run.time(host_then_read)
run.metric("sync.device_work_us", t_device.median_s * 1e6, "us", label="device work alone (chain + .item())")
run.metric("sync.host_work_us", t_host.median_s * units * 1e6, "us", label=f"host work alone ({units} sorts)")
run.metric("sync.read_first_us", t_serial.median_s * 1e6, "us", label=".item() before the host work")
run.metric("sync.read_last_us", t_overlap.median_s * 1e6, "us", label=".item() after the host work")
run.metric("sync.overlap_gain", t_serial.median_s / t_overlap.median_s, "x", label="read-first over read-last")

run.save()
