# %% [markdown]
# # Post-training quantization: INT8 weights, INT8 activations, scales, calibration, deployment
#
# Post-training quantization (PTQ) replaces a trained model's float numbers by small integers and
# a scale, without retraining: `w ~= q * s` with `q` in [-127, 127] for INT8. Two choices decide
# whether accuracy survives: the **granularity** of the scale (one per tensor, or one per output
# channel) and, when activations are quantized too, the **range** each activation scale covers,
# which is chosen from a few calibration batches by an **observer** (min-max, or a percentile that
# clips the rarest values). Whether it is faster depends on the kernels, not on the bit count.
#
# The model: an MLP trained here on scikit-learn's digits (demos/t5_compression/_model.py). The
# quantizer is written out in plain PyTorch (_quant.py) so every rounding step is visible and
# checked against an integer-arithmetic reference; real INT8 kernels come from torchao (where it is
# installed) and from ONNX Runtime's quantizer on the exported model (the deployment view).

# %%
import copy
import os
import tempfile
import warnings

import numpy as np
import torch

from demos.harness import threads
from demos.harness.run import start
from demos.t5_compression._model import MLP, accuracy, digits, trained
from demos.t5_compression._quant import (calibrate, layer_inputs, observe, quantize_weight, run_integer,
                                         run_quantized, with_outlier_channel)

run = start(
    "ptq",
    title="Post-training quantization: BF16, INT8 weight-only and W8A8, scales, calibration, ONNX Runtime",
    sizes={  # (seeds for the accuracy spread, batch rows for the model, width of the large linear layer, its rows)
        "tiny": ([0, 1], [1, 64], 256, [1, 64]),
        "small": ([0, 1, 2], [1, 600], 2048, [1, 256]),
        "full": ([0, 1, 2], [1, 600, 8192], 8192, [1, 256, 8192]),
    },
    cpu_threads=1,
)
seeds, batch_sweep, big_width, big_rows = run.sizes
HIDDEN, EPOCHS = 256, 30
x_tr, y_tr, x_te, y_te = digits()
models = {s: trained(HIDDEN, s, EPOCHS, log=run.log)[0] for s in seeds}
model = models[seeds[0]]

# %% [markdown]
# ## Correctness first
#
# The simulated quantized model (`run_quantized`: integers dequantized to float32) must give the
# numbers an integer kernel gives: compared with `run_integer`, which multiplies uint8 activation
# codes by int8 weight codes and sums them exactly in int64 before one rescale per output (the
# tolerance allows an activation that sits on a rounding tie in one path and not in the other to
# land one code apart in a later layer: float32 and float64 sums differ in the last bits). And the
# per-channel INT8 model must stay close to the float model: its logits within a stated bound.

# %%
act_256 = calibrate(model, x_tr[:256], "minmax")
for per_channel in (False, True):
    run.check_close(f"w8a8_simulated_equals_integer.{'per_channel' if per_channel else 'per_tensor'}",
                    run_quantized(model, x_te, 8, per_channel, act_256), run_integer(model, x_te, per_channel, act_256),
                    rtol=1e-3, atol=5e-2, reference_name="integer-arithmetic W8A8 (int64 accumulation)")
with torch.no_grad():
    logits_fp32 = model(x_te)
logits_w8 = run_quantized(model, x_te, 8, True)
rel = float((logits_w8 - logits_fp32).norm() / logits_fp32.norm())
run.check("w8_per_channel_close_to_fp32", rel < 0.01, f"relative L2 error of INT8 per-channel logits {rel:.2e} < 1e-2")
run.metric("w8_per_channel.logit_rel_error", rel, "fraction", label="INT8 per-channel weights: relative error of the logits")
codes, _ = quantize_weight(model.layers[1].weight, 8, True)
run.check("int8_codes_in_range", int(codes.abs().max()) <= 127, f"max |code| {int(codes.abs().max())} <= 127")

# %% [markdown]
# ## Accuracy of each format, over several trained seeds
#
# `Wn` = n-bit weights, `A8` = 8-bit activations (static: ranges fixed by calibration on 256
# training images). Every variant is evaluated on the 600 held-out images for each seed.

# %%
variants = {
    "fp32": lambda m, x: m(x),
    "bf16": lambda m, x: m.to(torch.bfloat16)(x.to(torch.bfloat16)).float(),
    "w8_per_tensor": lambda m, x: run_quantized(m, x, 8, False),
    "w8_per_channel": lambda m, x: run_quantized(m, x, 8, True),
    "w4_per_tensor": lambda m, x: run_quantized(m, x, 4, False),
    "w4_per_channel": lambda m, x: run_quantized(m, x, 4, True),
    "w8a8_minmax": lambda m, x: run_quantized(m, x, 8, True, calibrate(m, x_tr[:256], "minmax")),
    "w8a8_percentile": lambda m, x: run_quantized(m, x, 8, True, calibrate(m, x_tr[:256], "percentile")),
}
acc = {name: [accuracy(lambda x: fn(copy.deepcopy(models[s]), x), x_te, y_te) for s in seeds]
       for name, fn in variants.items()}
for name, values in acc.items():
    run.metric(f"acc.{name}", float(np.mean(values)), "fraction", label=f"{name}: held-out accuracy, mean of {len(seeds)} seeds")
    run.metric(f"acc.{name}.spread", max(values) - min(values), "fraction", label=f"{name}: max - min over seeds")
run.table("accuracy", f"Held-out accuracy (600 digits) by format, {len(seeds)} seeds",
          ["variant", "mean", "min", "max", "drop vs fp32 (points)"],
          [[n, round(float(np.mean(v)), 4), round(min(v), 4), round(max(v), 4),
            round(100 * (np.mean(acc["fp32"]) - np.mean(v)), 2)] for n, v in acc.items()])

# %% [markdown]
# ## What the scale's granularity does to the weights themselves
#
# Accuracy on 600 images is a coarse instrument: a redundant classifier can absorb a lot of weight
# error before a prediction flips. The weights' own error is not: ||Q(W) - W|| / ||W||, summed over the
# model's three weight matrices, with 4-bit codes and one scale per tensor or per output channel.

# %%
def weight_rel_error(m, bits, per_channel):
    err = ref = 0.0
    for layer in m.layers:
        w = layer.weight.detach()
        codes, scale = quantize_weight(w, bits, per_channel)
        err += float((codes.float() * scale - w).pow(2).sum())
        ref += float(w.pow(2).sum())
    return (err / ref) ** 0.5


for name, per_channel in (("w4_per_tensor", False), ("w4_per_channel", True)):
    errors = [weight_rel_error(models[s], 4, per_channel) for s in seeds]
    run.metric(f"{name}.weight_rel_error", float(np.mean(errors)), "fraction",
               label=f"{name}: relative L2 error of all weight matrices, mean of {len(seeds)} seeds")

# %% [markdown]
# ## One outlier channel: per-tensor scales fail, per-channel scales do not
#
# `with_outlier_channel` multiplies one hidden unit's incoming weights by a factor and divides its
# outgoing weights by the same factor: the float model computes exactly the same function, but one
# weight row is now `factor` times larger. A per-tensor scale is set by that row, so every other
# row is left with a handful of integer levels; a per-channel scale is not affected. The same unit's
# *activation* is also `factor` times larger, which hurts a per-tensor activation scale (W8A8) in
# the same way, and per-channel weight scales cannot help there: the activation scale sits on the
# reduction dimension. SmoothQuant's remedy is to divide that activation channel by `s` and multiply
# the matching weight column by `s` (here: undo part of the factor), moving the range into the
# weights, which per-channel scales handle.

# %%
channel = int(torch.relu(model.layers[0](x_tr)).mean(0).argmax())  # an active unit, not a dead one


def smoothed(m, x_calib, alpha=0.5):
    """SmoothQuant-style migration into the previous layer: per hidden input channel j of layers 1..,
    s_j = max|X_j|^alpha / max|W_:,j|^(1-alpha); X_j /= s_j (folded into the previous row and bias,
    since ReLU commutes with a positive scale), W_:,j *= s_j."""
    m = copy.deepcopy(m)
    with torch.no_grad():
        for i in range(1, len(m.layers)):
            a_max = layer_inputs(m, x_calib)[i].abs().amax(0).clamp(min=1e-5)
            w_max = m.layers[i].weight.abs().amax(0).clamp(min=1e-5)
            s = a_max**alpha / w_max ** (1 - alpha)
            m.layers[i - 1].weight.div_(s[:, None])
            m.layers[i - 1].bias.div_(s)
            m.layers[i].weight.mul_(s[None, :])
    return m


factors = [1, 10, 30, 100, 300, 1000]
outlier = {k: [] for k in ("w8_per_tensor", "w8_per_channel", "w8a8_per_tensor_act", "w8a8_smoothed")}
for factor in factors:
    m = with_outlier_channel(model, layer=0, channel=channel, factor=float(factor))
    if factor == 300:
        with torch.no_grad():
            run.check_close("outlier_model_is_the_same_function", m(x_te), logits_fp32, rtol=1e-3, atol=1e-3,
                            reference_name="the original model's logits")
    sm = smoothed(m, x_tr[:256])
    outlier["w8_per_tensor"].append(accuracy(lambda x: run_quantized(m, x, 8, False), x_te, y_te))
    outlier["w8_per_channel"].append(accuracy(lambda x: run_quantized(m, x, 8, True), x_te, y_te))
    outlier["w8a8_per_tensor_act"].append(
        accuracy(lambda x: run_quantized(m, x, 8, True, calibrate(m, x_tr[:256], "minmax")), x_te, y_te))
    outlier["w8a8_smoothed"].append(
        accuracy(lambda x: run_quantized(sm, x, 8, True, calibrate(sm, x_tr[:256], "minmax")), x_te, y_te))
run.series("outlier", f"Outlier x{factors[-1]}: INT8 weights per-tensor {outlier['w8_per_tensor'][-1]:.0%} accurate, "
           f"per-channel {outlier['w8_per_channel'][-1]:.0%}",
           "outlier factor", "held-out accuracy", {k: (factors, v) for k, v in outlier.items()}, x_log=True)
i300 = factors.index(300)
for k, v in outlier.items():
    run.metric(f"outlier300.{k}", v[i300], "fraction", label=f"outlier factor 300: {k} accuracy (seed {seeds[0]})")

# %% [markdown]
# ## Calibration: how many samples, which observer
#
# Static activation quantization fixes each layer's input range before deployment. With min-max,
# a calibration set that is too small sees a narrower range than real inputs, and values outside
# it are clipped at run time; a percentile observer clips the rarest values on purpose, to spend
# the 256 levels on the common ones. Measured here: held-out accuracy (W8A8, per-channel weights)
# and the share of held-out activation values that fall outside the calibrated range.

# %%
calib_sizes = [1, 4, 16, 64, 256, len(x_tr)]
held_inputs = layer_inputs(model, x_te)
calib = {}
for observer in ("minmax", "percentile"):
    for n in calib_sizes:
        ranges = [observe(a, observer) for a in layer_inputs(model, x_tr[:n])]
        act = calibrate(model, x_tr[:n], observer)
        clipped = sum(int(((h < lo) | (h > hi)).sum()) for h, (lo, hi) in zip(held_inputs, ranges))
        calib[observer, n] = (accuracy(lambda x: run_quantized(model, x, 8, True, act), x_te, y_te),
                              clipped / sum(h.numel() for h in held_inputs))
run.table("calibration", "W8A8 (per-channel weights): calibration size and observer",
          ["observer", "calibration images", "held-out accuracy", "held-out values outside the range"],
          [[o, n, round(a, 4), f"{c:.2e}"] for (o, n), (a, c) in calib.items()])
run.series("calibration_clipped", "Held-out activations outside the calibrated range", "calibration images",
           "fraction clipped", {o: (calib_sizes, [calib[o, n][1] for n in calib_sizes]) for o in ("minmax", "percentile")},
           x_log=True)
for o in ("minmax", "percentile"):
    for n in (1, 256):
        run.metric(f"calib.{o}.n{n}.acc", calib[o, n][0], "fraction", label=f"W8A8 accuracy, {o}, {n} calibration images")
        run.metric(f"calib.{o}.n{n}.clipped", calib[o, n][1], "fraction",
                   label=f"held-out activations clipped, {o}, {n} calibration images")

# %% [markdown]
# ## Size in bytes
#
# Counted from the tensors themselves: INT8 stores one byte per weight plus one float32 scale per
# output channel; INT4 would pack two codes per byte (counted, not stored that way here). Biases
# stay float32, as in every deployment format.

# %%
def tensor_bytes(m): return sum(p.numel() * p.element_size() for p in m.parameters())


n_w = sum(l.weight.numel() for l in model.layers)
n_b = sum(l.bias.numel() for l in model.layers)
n_rows = sum(l.weight.shape[0] for l in model.layers)
sizes_b = {"fp32": tensor_bytes(model), "bf16": tensor_bytes(copy.deepcopy(model).to(torch.bfloat16)),
           "int8_per_channel": n_w + 4 * n_rows + 4 * n_b, "int4_per_channel": n_w // 2 + 4 * n_rows + 4 * n_b}
for k, v in sizes_b.items():
    run.metric(f"bytes.{k}", v, "bytes", label=f"model weights and biases, {k}", origin="computed")
run.metric("bytes.fp32_over_int8", sizes_b["fp32"] / sizes_b["int8_per_channel"], "x", label="fp32 bytes over INT8 bytes", origin="computed")

# %% [markdown]
# ## Latency in PyTorch: is INT8 faster?
#
# Whole model at batch 1 and a large batch, then one large linear layer. INT8 helps only where a
# kernel reads INT8 directly and the work is limited by what INT8 saves (bytes of weights for
# weight-only, multiply throughput for W8A8); at small shapes the extra steps (quantizing the
# activations, rescaling outputs, dispatch through a tensor subclass) cost more than they save.
# torchao provides the INT8 kernels on a CPU; the GPU machine of this project has no torchao, so
# these variants are recorded as not run there.

# %%
try:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torchao
    has_torchao = True
except ImportError as exc:
    has_torchao, torchao_reason = False, f"torchao is not installed here ({exc})"

device = run.torch_device


def torch_variants(m: torch.nn.Module) -> dict:
    out = {"fp32": m.to(device).float(), "bf16": copy.deepcopy(m).to(device, torch.bfloat16)}
    if has_torchao:
        for name, config in (("int8_weight_only", Int8WeightOnlyConfig()),
                             ("int8_dynamic_w8a8", Int8DynamicActivationInt8WeightConfig())):
            q = copy.deepcopy(m).to(device, torch.bfloat16 if name == "int8_weight_only" else torch.float32)
            quantize_(q, config)
            out[name] = q
    if not run.device.is_gpu:  # the CPU kernel torchao's weight-only path calls, called directly (no tensor subclass)
        layers = [(quantize_weight(l.weight.detach(), 8, True), l.bias.detach().bfloat16())
                  for l in m if isinstance(l, torch.nn.Linear)] if isinstance(m, torch.nn.Sequential) else None
        if layers is not None:
            (codes, scale), bias = layers[0]
            out["int8_weight_only_aten"] = lambda x: torch.ops.aten._weight_int8pack_mm(
                x, codes, scale.flatten().bfloat16()) + bias
    return out


latency = {}
with torch.no_grad():
    for scope, m in (("model", copy.deepcopy(model)),
                     (f"linear{big_width}", torch.nn.Sequential(torch.nn.Linear(big_width, big_width)))):
        for name, q in torch_variants(m).items():
            dtype = (torch.bfloat16 if name.startswith("int8_weight_only") else
                     torch.float32 if name == "int8_dynamic_w8a8" else next(q.parameters()).dtype)
            width = 64 if scope == "model" else big_width
            if name == "int8_weight_only_aten":
                ref = m(x_check := torch.randn(3, width, device=device)).double()
                run.check_close("aten_int8pack_mm.layer", q(x_check.bfloat16()), ref, rtol=3e-2, atol=3e-2,
                                reference_name="the fp32 layer (INT8 per-channel weights, bf16 activations)")
            if scope == "model" and name.startswith("int8"):
                out = q(x_te.to(device, dtype)).float()
                run.check(f"torchao.{name}.accuracy", accuracy(lambda x: out, x_te, y_te) >= acc["fp32"][0] - 0.01,
                          f"torchao {name} held-out accuracy {accuracy(lambda x: out, x_te, y_te):.4f} "
                          f"within 1 point of fp32 {acc['fp32'][0]:.4f}")
            for rows in (batch_sweep if scope == "model" else big_rows):
                x = torch.randn(rows, width, device=device, dtype=dtype)
                latency[scope, name, rows] = run.time(lambda: q(x)).median_s
                run.log(f"  {scope} {name:18s} rows {rows:5d} {latency[scope, name, rows] * 1e6:10.1f} us")
if not has_torchao:
    run.not_run("torchao int8_weight_only / int8_dynamic_w8a8", torchao_reason)
else:  # what each torchao path runs, per call: the profiler's op list for one row through the large layer
    lines = []
    with torch.no_grad():
        for name, q in torch_variants(torch.nn.Sequential(torch.nn.Linear(big_width, big_width))).items():
            if not name.startswith("int8_") or name.endswith("_aten"):
                continue
            x = torch.randn(1, big_width, device=device, dtype=torch.bfloat16 if "weight_only" in name else torch.float32)
            q(x)
            with torch.profiler.profile() as prof:
                q(x)
            ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:6]
            lines.append(f"{name} (torchao {torchao.__version__}), one {big_width}x{big_width} layer, 1 row; "
                         "ops by self CPU time:\n" + "\n".join(f"  {e.key:34s} calls {e.count}" for e in ops))
    run.artifact("torchao_ops", "\n\n".join(lines))
if ("linear" + str(big_width), "int8_weight_only_aten", 1) in latency and has_torchao:
    run.metric(f"latency.linear{big_width}.torchao_over_aten_rows1",
               latency[f"linear{big_width}", "int8_weight_only", 1] / latency[f"linear{big_width}", "int8_weight_only_aten", 1],
               "x", label="torchao INT8 weight-only time over the fused aten kernel's time, one row")
rows_table = []
for (scope, name, rows), t in latency.items():
    rows_table.append([scope, name, rows, round(t * 1e6, 1), round(latency[scope, "fp32", rows] / t, 2)])
    run.metric(f"latency.{scope}.{name}.rows{rows}_us", t * 1e6, "us", label=f"{scope}, {name}, {rows} rows")
    run.metric(f"latency.{scope}.{name}.rows{rows}_speedup", latency[scope, "fp32", rows] / t, "x",
               label=f"{scope}, {name}, {rows} rows: fp32 time over this time")
run.table("latency_torch", "PyTorch latency (median)", ["scope", "variant", "rows", "us", "speedup vs fp32"], rows_table)

# %% [markdown]
# ## Deployment view: ONNX export and ONNX Runtime's quantizer
#
# The model is exported once; `quantize_dynamic` stores INT8 weights and quantizes activations at
# run time (per batch), `quantize_static` stores INT8 weights and fixed activation ranges from a
# calibration reader (256 training images, QDQ format, per-channel weights). Each file is loaded
# in ONNX Runtime on one thread: file size, held-out accuracy, latency.

# %%
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,  # noqa: E402
                                      quantize_static)


class DigitsReader(CalibrationDataReader):
    def __init__(self, x):
        self.items = iter([{"x": x[i:i + 1].numpy()} for i in range(len(x))])

    def get_next(self):
        return next(self.items, None)


def session(path):
    options = threads.onnxruntime_options(ort, run.cpu_threads)
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


onnx_rows = []
with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
    warnings.simplefilter("ignore")
    paths = {k: os.path.join(folder, f"{k}.onnx") for k in ("fp32", "ort_dynamic_int8", "ort_static_int8")}
    cpu_model = copy.deepcopy(model).cpu().float()
    torch.onnx.export(cpu_model, (x_te[:2],), paths["fp32"], dynamo=True, input_names=["x"], output_names=["y"],
                      dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=4096)}})
    exported = onnx.load(paths["fp32"])
    del exported.graph.value_info[:]  # the exporter's intermediate shapes; the quantizer re-infers its own
    onnx.save(exported, paths["fp32"])  # one file, weights inside
    quantize_dynamic(paths["fp32"], paths["ort_dynamic_int8"], weight_type=QuantType.QInt8)
    quantize_static(paths["fp32"], paths["ort_static_int8"], DigitsReader(x_tr[:256]), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    for name, path in paths.items():
        sess = session(path)
        logits = sess.run(None, {"x": x_te.numpy()})[0]
        a = float((logits.argmax(-1) == y_te.numpy()).mean())
        size = os.path.getsize(path)
        if name == "fp32":
            run.check_close("onnx_fp32_equals_torch", torch.from_numpy(logits), logits_fp32, rtol=1e-4, atol=1e-4,
                            reference_name="PyTorch fp32 logits")
        else:
            run.check(f"{name}.accuracy", a >= acc["fp32"][0] - 0.01, f"{name} held-out accuracy {a:.4f} within "
                      f"1 point of fp32 {acc['fp32'][0]:.4f}")
        ops = sorted({n.op_type for n in onnx.load(path).graph.node})
        run.metric(f"onnx.{name}.bytes", size, "bytes", label=f"ONNX file size, {name}")
        run.metric(f"onnx.{name}.acc", a, "fraction", label=f"held-out accuracy, {name} in ONNX Runtime")
        for rows in batch_sweep[:2]:
            feed = {"x": np.ascontiguousarray(x_te.repeat(rows // len(x_te) + 1, 1)[:rows].numpy())}
            t = run.time(lambda: sess.run(None, feed)).median_s
            run.metric(f"onnx.{name}.rows{rows}_us", t * 1e6, "us", label=f"ONNX Runtime, {name}, {rows} rows")
            onnx_rows.append([name, size, round(a, 4), rows, round(t * 1e6, 1), " ".join(ops)])
run.table("onnx", "ONNX Runtime (one thread): file, accuracy, latency",
          ["variant", "file bytes", "held-out accuracy", "rows", "median us", "ops in the file"], onnx_rows)
run.metric("onnx.fp32_over_static_int8_bytes", run.metrics["onnx.fp32.bytes"]["value"] /
           run.metrics["onnx.ort_static_int8.bytes"]["value"], "x", label="ONNX file: fp32 size over static INT8 size")
r = batch_sweep[1]
for name in ("ort_dynamic_int8", "ort_static_int8"):
    run.metric(f"onnx.{name}.rows{r}_speedup", run.metrics[f"onnx.fp32.rows{r}_us"]["value"] /
               run.metrics[f"onnx.{name}.rows{r}_us"]["value"], "x", label=f"ONNX Runtime fp32 time over {name}, {r} rows")
    run.metric(f"onnx.{name}.rows1_speedup", run.metrics["onnx.fp32.rows1_us"]["value"] /
               run.metrics[f"onnx.{name}.rows1_us"]["value"], "x", label=f"ONNX Runtime fp32 time over {name}, 1 row")
run.save()
