# %% [markdown]
# # Data-center vs edge: published specs, their rooflines, and this machine's
#
# A roofline says how fast a kernel can possibly run on a chip: it is capped by the chip's peak
# compute, or by its memory bandwidth times the kernel's *arithmetic intensity* (FLOPs per byte moved),
# whichever is lower. The *ridge point*, peak / bandwidth, is the intensity where the two meet: a kernel
# below it is memory-bound there, above it compute-bound. Data-center and edge chips differ in both
# numbers, and in their ratio, so the same kernel can be memory-bound on one and compute-bound on another.
#
# This demo reads every published figure from the project's one datasheet file
# (`records/datasheets.toml`, each entry with its source), computes each chip's ridge points, draws
# the rooflines, then builds the roofline of the machine running the demo from its own same-run ceilings
# and places real kernels from this project's CPU records on it. Each kernel's intensity is computed from
# its demo's shapes (the FLOPs and the bytes its arithmetic must touch), never guessed.

# %%
import ast

from demos.harness.run import start
from records.inputs import declare

# What this demo reads besides its code: every datasheet entry, and four kernels' CPU records (their
# freshness follows these: a new datasheet figure or a re-measured kernel stales this record).
INPUTS = declare(datasheets=["*"], records=["shard_gemm/cpu", "attention_cost/cpu", "weight_only_int8/cpu",
                                            "kernel_fusion/cpu"])

run = start("hardware_roofline", title="Published specs, rooflines and ridge points, with this machine's roofline",
            sizes={"tiny": 24, "small": 48, "full": 48}, cpu_threads=None)
points = run.sizes  # points per roofline curve

SHEETS = INPUTS.datasheets()
CHIPS = ["h100", "h200", "a100", "l4", "l40s", "jetson-agx-orin", "snapdragon-x-elite-npu"]
PRECISIONS = [("float32", "FP32"), ("tfloat32", "TF32"), ("bfloat16", "BF16"), ("float8", "FP8")]

# %% [markdown]
# ## The spec table
#
# Dense peaks (no 2:4 sparsity), in TFLOP/s for floating point and TOPS for integers; bandwidth in
# decimal GB/s. A blank means the vendor publishes no such figure for that chip (the H100 and H200
# datasheets give no INT4 figure; the laptop NPU's vendor gives only an INT8 one).

# %%
def peak(sheet: dict, precision: str):
    return sheet.get("tflops", {}).get(precision) or sheet.get("tops", {}).get(precision)


rows, links = [], []
for chip in CHIPS:
    s = SHEETS[chip]
    chip_cell = f"[{s['label']}]({s['source'].rsplit(', ', 1)[-1]})"  # the chip's name links its source
    rows.append([chip_cell, s.get("memory", ""), s.get("memory_gb", ""), s["memory_gbps"],
                 *[peak(s, p) or "" for p, _ in PRECISIONS], s.get("tops", {}).get("int8", ""),
                 s.get("tops", {}).get("int4", ""), s.get("power_w", "")])
    links.append([chip_cell, s.get("interconnect", "")])
run.table("specs", "Published figures (dense peaks); each chip links its datasheet",
          ["chip", "memory", "GB", "GB/s", "FP32", "TF32", "BF16", "FP8", "INT8", "INT4", "W"], rows)
run.check("specs.every_figure_cited", all(SHEETS[c]["source"].count("https://") >= 1 for c in CHIPS),
          f"{len(CHIPS)} chips, each with a source URL in records/datasheets.toml")

# %% [markdown]
# ## Ridge points, computed
#
# Ridge = peak FLOP/s / bandwidth in bytes/s. For the GPUs the headline is the BF16 one (what a
# transformer's matmuls run in); the NPU has only an INT8 figure, so its ridge is in ops per byte.
# Per watt figures divide the same peaks by the datasheet's maximum power.

# %%
# Peaks a datasheet does not print, derived from one it does (records/datasheets.toml says how): a ridge point
# built on one is computed, not read off the datasheet.
DERIVED = {"jetson-agx-orin": {"bfloat16", "float16", "int8"}}  # halved from the GPU's sparse INT8 TOPS

ridge_rows = []
for chip in CHIPS:
    s = SHEETS[chip]
    bw = s["memory_gbps"] * 1e9
    cells = []
    for precision in ("float32", "bfloat16", "float8", "int8"):
        value = peak(s, precision)
        ridge = value * 1e12 / bw if value else None
        cells.append(round(ridge, 1) if ridge else "")
        if ridge:
            run.metric(f"ridge.{chip}.{precision}", ridge, "FLOP/byte",
                       label=f"{s['label']} {precision} ridge point (dense peak / memory bandwidth)",
                       origin="computed" if precision in DERIVED.get(chip, ()) else "datasheet")
    main = peak(s, "bfloat16") or peak(s, "int8")
    per_watt = round(main / s["power_w"], 2) if s.get("power_w") else ""
    if s.get("power_w"):
        run.metric(f"per_watt.{chip}", 1e3 * main / s["power_w"], "GFLOP/J",
                   label=f"{s['label']}: dense BF16 peak over maximum power",
                   origin="computed" if "bfloat16" in DERIVED.get(chip, ()) else "datasheet")
        run.metric(f"gbps_per_watt.{chip}", 1e3 * s["memory_gbps"] / s["power_w"], "MB/J",
                   label=f"{s['label']}: memory bandwidth over maximum power", origin="datasheet")
    ridge_rows.append([s["label"], *cells, per_watt])
run.table("ridges", "Ridge points (FLOP or op per byte of memory traffic) and peak per watt, computed",
          ["chip", "FP32", "BF16", "FP8", "INT8", "BF16 TFLOP/s per W"], ridge_rows)

# Ratios a page can quote: the same chip family's memory generations, and data-center vs edge.
run.metric("h200_over_h100.bandwidth", SHEETS["h200"]["memory_gbps"] / SHEETS["h100"]["memory_gbps"], "x",
           label="H200 over H100 SXM memory bandwidth (same tensor peaks)", origin="datasheet")
run.metric("h100_over_orin.bandwidth", SHEETS["h100"]["memory_gbps"] / SHEETS["jetson-agx-orin"]["memory_gbps"], "x",
           label="H100 SXM over Jetson AGX Orin memory bandwidth", origin="datasheet")
run.metric("h100_over_orin.bf16", peak(SHEETS["h100"], "bfloat16") / peak(SHEETS["jetson-agx-orin"], "bfloat16"), "x",
           label="H100 SXM over Jetson AGX Orin (GPU) dense BF16 peak", origin="computed")  # Orin's is derived
run.metric("h100_over_l4.power", SHEETS["h100"]["power_w"] / SHEETS["l4"]["power_w"], "x",
           label="H100 SXM over L4 maximum power", origin="datasheet")

# %% [markdown]
# ## The rooflines
#
# attainable(I) = min(peak, I x bandwidth) per chip, in its headline precision (BF16; INT8 for the NPU).

# %%
intensities = [10 ** (-2 + 6 * i / (points - 1)) for i in range(points)]
lines = {}
for chip in CHIPS:
    s = SHEETS[chip]
    main = peak(s, "bfloat16") or peak(s, "int8")
    lines[f"{s['label']} ({'BF16' if peak(s, 'bfloat16') else 'INT8'})"] = (
        intensities, [min(main, i * s["memory_gbps"] / 1e3) for i in intensities])
bf16_ridge = {SHEETS[c]["label"]: peak(SHEETS[c], "bfloat16") * 1e3 / SHEETS[c]["memory_gbps"]
              for c in CHIPS if peak(SHEETS[c], "bfloat16")}
low, high = min(bf16_ridge, key=bf16_ridge.get), max(bf16_ridge, key=bf16_ridge.get)
run.series("rooflines", f"Dense BF16 ridge points: {bf16_ridge[low]:.0f} ({low}) to {bf16_ridge[high]:.0f} "
           f"FLOP/byte ({high})", "arithmetic intensity (FLOP/byte)",
           "attainable TFLOP/s (TOPS for INT8)", lines, x_log=True, y_log=True, computed=True)  # from datasheets

# %% [markdown]
# ## This machine's roofline and real kernels on it
#
# The ceilings the harness measured at the start of this run: a large copy (bytes read + written) and a
# large FP32 matmul. Then four kernels from this project's own CPU records. For each, FLOPs and bytes come
# from its demo's shapes; where the record also states a rate, our FLOP or byte count must reproduce it
# (rate x time), which checks that we read the record's shapes the way its demo meant them. The plot puts
# them on this run's roofline; the fraction in the table uses the ceilings measured in each kernel's own
# run, since a shared machine's bandwidth moves between runs.
#
# - shard_gemm t=1: a [512, 512] x [512, 2048] FP32 GEMM (T7). Bytes: both operands and the output once.
# - attention_cost sdpa_flash at its longest N: causal attention, useful FLOPs 2 N^2 d per head; bytes: Q,
#   K, V and O once (what a fused kernel must move).
# - weight_only_int8 float32 at one row: a GEMV, 2 FLOPs per 4-byte weight.
# - kernel_fusion bias_relu compiled at its largest size: 2 FLOPs (add, max) per element per 8 bytes.

# %%
def load(demo):
    rec = INPUTS.record(demo, "cpu")
    if rec is None:
        run.not_run(f"kernel {demo}", f"no CPU record at docs/results/{demo}/cpu.json")
        return None
    # The kernel's own run's ceilings: its fraction of the roofline is judged against the machine state it
    # was timed in (a shared machine's copy bandwidth moves between runs).
    own = (rec["ceilings"]["copy_bandwidth"]["value"], rec["ceilings"]["matmul_fp32"]["value"])
    return rec, ast.literal_eval(rec["settings"]["sizes"]), (rec["settings"]["cpu_threads"]["timings"], own)


kernels = []  # (label, flops, bytes, seconds, threads)
if (got := load("shard_gemm")):
    rec, (b, s, h), th = got
    m, k, n = b * s, h, 4 * h
    seconds = rec["metrics"]["gemm.t1.ms"]["value"] / 1e3
    flops = 2 * m * k * n
    run.check_close("kernel.shard_gemm.flops_match_record", __import__("torch").tensor(flops / seconds / 1e12),
                    __import__("torch").tensor(rec["metrics"]["gemm.t1.tflops"]["value"]), rtol=1e-3, atol=0,
                    reference_name="the record's own TFLOP/s")
    kernels.append((f"GEMM {m}x{k}x{n} (shard_gemm)", flops, 4 * (m * k + k * n + m * n), seconds, th))
if (got := load("attention_cost")):
    rec, (batch, heads, d, lengths), th = got
    n = max(lengths)
    seconds = rec["metrics"]["sdpa_flash.ms"]["value"] / 1e3
    flops = 2 * 2 * batch * heads * n * n * d / 2
    run.check_close("kernel.attention.flops_match_record", __import__("torch").tensor(flops / seconds / 1e12),
                    __import__("torch").tensor(rec["metrics"]["sdpa_flash.tflops"]["value"]), rtol=1e-3, atol=0,
                    reference_name="the record's own TFLOP/s")
    kernels.append((f"flash attention N={n} (attention_cost)", flops, 4 * 4 * batch * heads * n * d, seconds, th))
if (got := load("weight_only_int8")):
    rec, (width, _, _), th = got
    seconds = rec["metrics"]["linear.float32.rows1_ms"]["value"] / 1e3
    weight_bytes = 4 * width * width
    run.check_close("kernel.gemv.bytes_match_record", __import__("torch").tensor(weight_bytes / seconds / 1e9),
                    __import__("torch").tensor(rec["metrics"]["linear.float32.rows1_gbps"]["value"]), rtol=1e-3, atol=0,
                    reference_name="the record's own GB/s")
    kernels.append((f"GEMV {width}x{width} (weight_only_int8)", 2 * width * width, weight_bytes + 8 * width, seconds, th))
if (got := load("kernel_fusion")):
    rec, sizes, th = got
    m, n = sizes[-1]
    seconds = rec["metrics"]["bias_relu.compiled.median_us"]["value"] / 1e6
    nbytes = 4 * (2 * m * n + n)
    run.check_close("kernel.bias_relu.bytes_match_record", __import__("torch").tensor(nbytes / seconds / 1e9),
                    __import__("torch").tensor(rec["metrics"]["bias_relu.compiled.gbps"]["value"]), rtol=1e-3, atol=0,
                    reference_name="the record's own GB/s")
    kernels.append((f"bias+ReLU {m}x{n} (kernel_fusion)", 2 * m * n, nbytes, seconds, th))

bw = run.ceilings["copy_bandwidth"]["value"]  # GB/s
fp32 = run.ceilings["matmul_fp32"]["value"]  # TFLOP/s
cpu_ridge = fp32 * 1e12 / (bw * 1e9)
run.metric("cpu.ridge_fp32", cpu_ridge, "FLOP/byte", label="this machine: FP32 matmul ceiling / copy ceiling (this run)")
run.metric("cpu.ridge_vs_h100_bf16", SHEETS["h100"]["tflops"]["bfloat16"] * 1e3 / SHEETS["h100"]["memory_gbps"] / cpu_ridge,
           "x", label="H100 SXM BF16 ridge over this machine's FP32 ridge")

k_rows, xs, ys = [], [], []
fractions = []
for label, flops, nbytes, seconds, (th, (own_bw, own_fp32)) in kernels:
    ai = flops / nbytes
    achieved = flops / seconds / 1e12
    bound = min(own_fp32, ai * own_bw / 1e3)
    fractions.append(achieved / bound)
    key = label.split(" (")[1].rstrip(")")
    run.metric(f"kernel.{key}.intensity", ai, "FLOP/byte", label=f"{label}: FLOPs / bytes, from its shapes", origin="computed")
    run.metric(f"kernel.{key}.of_roofline", achieved / bound, "fraction",
               label=f"{label}: achieved FLOP rate over the roofline of its own run's ceilings at its intensity")
    side = "compute" if ai > own_fp32 * 1e3 / own_bw else "memory"
    run.metric(f"kernel.{key}.compute_bound", 1.0 if side == "compute" else 0.0, "bool",
               label=f"{label}: 1 if its intensity is above the ridge point of its own run's ceilings")
    # Where the same kernel would sit on the data-center and edge rooflines (FP32 peaks, for a like-for-like dtype).
    where = [("compute" if ai > peak(SHEETS[c], "float32") * 1e3 / SHEETS[c]["memory_gbps"] else "memory")
             for c in ("h100", "l4", "jetson-agx-orin")]
    k_rows.append([label, f"{flops / 1e9:.3g}", f"{nbytes / 1e6:.3g}", round(ai, 3), round(achieved * 1e3, 2),
                   round(bound * 1e3, 2), round(achieved / bound, 3), th, side, *where])
    xs.append(ai)
    ys.append(achieved)
run.table("kernels", "Kernels from this project's CPU records on this machine's roofline",
          ["kernel", "GFLOP", "MB moved", "FLOP/byte", "achieved GFLOP/s", "its run's roofline GFLOP/s", "fraction",
           "threads", "bound here", "on H100 (FP32)", "on L4 (FP32)", "on Orin (FP32)"], k_rows)
# The kernels are CPU records: they are drawn on this machine's roofline only when this machine is a CPU.
points_here = {} if run.device.is_gpu else {label: ([x], [y]) for (label, *_), x, y in zip(kernels, xs, ys)}
if run.device.is_gpu:
    run.not_run("kernels on this GPU's roofline", "the placed kernels are CPU records (FP32, CPU shapes); their "
                "fractions above use their own runs' CPU ceilings, and they are not drawn on a GPU's roofline")
run.series("cpu_roofline", "This machine's roofline (same-run ceilings) with measured kernels",
           "arithmetic intensity (FLOP/byte)", "TFLOP/s",
           {"roofline (copy, FP32 matmul ceilings)": (intensities, [min(fp32, i * bw / 1e3) for i in intensities]),
            **points_here},
           x_log=True, y_log=True)
run.check("kernels.below_roofline", all(f <= 1.25 for f in fractions),
          f"every kernel's achieved rate is at most 1.25x the roofline of its own run's ceilings (largest "
          f"{max(fractions, default=0):.2f}x)")

# %%
run.table("interconnect", "Links between chips and to the host, from the same datasheets", ["chip", "interconnect"], links)
run.save()
