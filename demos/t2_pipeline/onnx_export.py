# %% [markdown]
# # ONNX: the block as an exchange format, run by ONNX Runtime
#
# ONNX is a framework-neutral graph format: a list of nodes from a versioned operator set, with
# the weights stored as initializers and the tensor shapes written into the file, either as numbers
# or as named symbols. An exporter writes it from PyTorch; a runtime such as ONNX Runtime or
# TensorRT reads it, rewrites it with its own graph optimizations and picks kernels for its
# hardware. The Python code, the autograd tape and the framework are gone: what remains is the
# inference graph.
#
# This demo exports the same transformer block with the batch dimension symbolic, validates the
# file with the ONNX checker, summarizes its node types before and after ONNX Runtime's graph
# optimizations, and checks that ONNX Runtime matches PyTorch at two batch sizes.

# %%
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import onnx
import onnxruntime as ort
import torch

from demos.common.block import SIZES, make_block, reference_forward
from demos.harness import threads
from demos.harness.run import start

run = start("onnx_export", title="The block exported to ONNX and run in ONNX Runtime", sizes=SIZES, cpu_threads=1)
_, seq, width, heads = run.sizes
# The exported file is device-neutral: export the float32 block on the CPU. ONNX Runtime's CPU
# provider runs it everywhere; its CUDA provider runs it too where that build is installed.
block = make_block(width, heads, "cpu", torch.float32)
BATCHES = (1, 3)  # two batch sizes through the one symbolic axis

# On a CPU both runtimes get one thread, so the latency comparison at the end is like for like. On
# a CPU shared with other work, PyTorch's OpenMP threads stalled whenever another process held a
# core, and one eager block call measured tens of milliseconds instead of about one or two.
TOLERANCE = dict(rtol=1e-4, atol=1e-4)

# %% [markdown]
# ## Export
#
# `torch.onnx.export(..., dynamo=True)` captures the block with `torch.export` and translates
# each ATen op into ONNX ops. `dynamic_shapes` names the batch dimension, so the file says
# `batch` where the example input said 4; the sequence length stays the number it was traced
# with. The first call is timed apart: it is the capture plus the translation.

# %%
example = torch.randn(2, seq, width)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    program, export_s = run.first_call(lambda: torch.onnx.export(
        block, (example,), dynamo=True, input_names=["x"], output_names=["y"],
        dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=1024)}}))
model = program.model_proto
run.metric("export_s", export_s, "s", label="torch.onnx.export (torch.export capture + translation to ONNX)")

onnx.checker.check_model(model, full_check=True)  # raises on an invalid model
input_dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
run.check("onnx.checker", True, f"onnx.checker.check_model(full_check=True) passed; input x has dims {input_dims}, "
          f"opset {max(o.version for o in model.opset_import if o.domain in ('', 'ai.onnx'))}")
run.check("onnx.batch_is_symbolic", isinstance(input_dims[0], str) and input_dims[1:] == [seq, width],
          f"input dims {input_dims}: batch symbolic, sequence and width fixed")

exported_ops = Counter(n.op_type for n in model.graph.node)
run.metric("onnx.nodes", len(model.graph.node), "nodes", label="ONNX graph nodes as exported")
run.metric("onnx.initializers", len(model.graph.initializer), "tensors", label="initializers (the weights)")

# The graph as text, without the weights' values (initializers, listed by name only).
graph_only = onnx.ModelProto()
graph_only.CopyFrom(model)
del graph_only.graph.initializer[:]
del graph_only.graph.value_info[:]  # and the inferred shapes of intermediates
run.artifact("onnx_graph", onnx.printer.to_text(graph_only.graph))

# %% [markdown]
# ## ONNX Runtime: its graph optimizations, and numerical parity with PyTorch
#
# At session creation ONNX Runtime rewrites the graph (constant folding, eliminating redundant
# nodes, fusing known patterns such as a bias add followed by GELU into one node) and can save
# the rewritten graph, which is how we see what it did. Then the same file runs at two batch sizes,
# each compared with PyTorch and with the float64 reference.

# %%
def session(provider: str, optimized_path: str | None = None) -> ort.InferenceSession:
    # on the CPU provider, as many threads as PyTorch got from the harness
    options = threads.onnxruntime_options(ort, run.cpu_threads) if provider == "CPUExecutionProvider" else \
        ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only
    if optimized_path:
        options.optimized_model_filepath = optimized_path
    # ONNX Runtime's CUDA provider runs float32 matmuls in TF32 unless told not to (10-bit mantissa,
    # about 1e-3 relative): off, so the float32 tolerances below mean the same on every provider.
    if provider == "CUDAExecutionProvider":
        try:
            return ort.InferenceSession(model.SerializeToString(), options, providers=[(provider, {"use_tf32": "0"})])
        except Exception as e:  # an onnxruntime without that option: say so, and run with its default
            run.log(f"  CUDA provider without use_tf32=0 ({str(e).splitlines()[0][:120]})")
    return ort.InferenceSession(model.SerializeToString(), options, providers=[provider])


with tempfile.TemporaryDirectory() as folder:
    optimized_file = str(Path(folder) / "optimized.onnx")
    cpu_session = session("CPUExecutionProvider", optimized_file)
    optimized = onnx.load(optimized_file)
optimized_ops = Counter(n.op_type for n in optimized.graph.node)
run.metric("ort.optimized_nodes", len(optimized.graph.node), "nodes", label="nodes after ONNX Runtime's graph optimizations (CPU)")
run.table("node_types", "ONNX node types: as exported, and after ONNX Runtime's optimizations (CPU provider)",
          ["op type", "exported", "after ORT optimization"],
          [[op, exported_ops.get(op, 0), optimized_ops.get(op, 0)]
           for op in sorted(set(exported_ops) | set(optimized_ops), key=lambda o: (-exported_ops.get(o, 0), o))])

providers = {"cpu": cpu_session}
if run.device.is_gpu and "CUDAExecutionProvider" in ort.get_available_providers():
    providers["cuda"] = session("CUDAExecutionProvider")
elif run.device.is_gpu:
    run.not_run("ONNX Runtime CUDA provider", "this onnxruntime build has no CUDAExecutionProvider "
                f"(available: {', '.join(ort.get_available_providers())})")
else:
    run.not_run("ONNX Runtime CUDA provider", "no GPU here")
run.not_run("TensorRT", "not installed in this environment: TensorRT builds an engine from the same ONNX file")

for batch in BATCHES:
    x = torch.randn(batch, seq, width)
    reference = reference_forward(block, x)
    with torch.no_grad():
        torch_out = block(x)
    run.check_close(f"pytorch.batch{batch}", torch_out, reference, **TOLERANCE)
    for provider, sess in providers.items():
        ort_out = torch.from_numpy(sess.run(None, {"x": x.numpy()})[0])
        run.check_close(f"ort_{provider}.batch{batch}", ort_out, reference, **TOLERANCE)
        run.check_close(f"ort_{provider}.batch{batch}.vs_pytorch", ort_out, torch_out, **TOLERANCE,
                        reference_name="PyTorch eager")
        if provider == "cpu":
            run.metric(f"parity.batch{batch}.max_abs_diff", float((ort_out - torch_out).abs().max()), "abs",
                       label=f"batch {batch}: largest |ONNX Runtime - PyTorch|")

# %% [markdown]
# The sequence length was not declared dynamic, so the exporter specialized it: the file only
# accepts the length it was traced with, and ONNX Runtime rejects any other before running.

# %%
try:
    cpu_session.run(None, {"x": torch.randn(1, seq // 2, width).numpy()})
    rejected = "accepted"
except Exception as err:  # onnxruntime's InvalidArgument
    rejected = str(err).strip().splitlines()[0]
run.check("ort.rejects_other_sequence_length", rejected != "accepted", rejected[:200])

# %% [markdown]
# ## Latency: ONNX Runtime vs PyTorch eager
#
# Both on the CPU (one thread each), same file, same input, batch 3. This is one small block, so
# per-call overheads matter as much as the kernels.

# %%
x = torch.randn(BATCHES[-1], seq, width)
feed = {"x": x.numpy()}
with torch.no_grad():
    timings = {"pytorch eager (CPU)": run.time(lambda: block(x))}
timings.update({f"onnx runtime ({p})": run.time(lambda s=s: s.run(None, feed)) for p, s in providers.items()})
run.table("latency", f"Block forward, batch {BATCHES[-1]} x seq {seq} x width {width} (float32)",
          ["runtime", "median (us)", "p10-p90 (us)"],
          [[k, round(t.median_s * 1e6, 1), f"{t.p10_s * 1e6:.1f}-{t.p90_s * 1e6:.1f}"] for k, t in timings.items()])
run.metric("latency.pytorch_us", timings["pytorch eager (CPU)"].median_s * 1e6, "us", label="PyTorch eager, CPU")
run.metric("latency.ort_cpu_us", timings["onnx runtime (cpu)"].median_s * 1e6, "us", label="ONNX Runtime, CPU provider")
run.metric("latency.ort_cpu_speedup", timings["pytorch eager (CPU)"].median_s / timings["onnx runtime (cpu)"].median_s,
           "x", label="ONNX Runtime (CPU) over PyTorch eager (CPU)")

run.save()
