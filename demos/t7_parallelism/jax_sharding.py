# %% [markdown]
# # The tensor-parallel MLP in JAX: shardings in, collectives out
#
# In PyTorch, Megatron-style tensor parallelism is written by hand: split W1 by columns and W2 by
# rows, run the local matmuls, and call one all-reduce (Shoeybi et al., [Megatron-LM: Training
# Multi-Billion Parameter Language Models Using Model Parallelism](https://arxiv.org/abs/1909.08053)).
# In JAX one states only *where each array lives*: a `Mesh` names the devices' axes, a
# `NamedSharding(mesh, PartitionSpec(...))` says which array dimension is split over which mesh axis,
# and `jax.jit` compiles the unchanged single-device function; XLA's SPMD partitioner propagates the
# shardings through the program and inserts the collectives it needs (JAX's guide
# [Distributed arrays and automatic parallelization](https://docs.jax.dev/en/latest/parallel.html);
# Xu et al., [GSPMD](https://arxiv.org/abs/2105.04663), whose propagation JAX now runs through its
# successor, Shardy).
#
# This demo compiles the same MLP `gelu(x @ W1) @ W2` under several shardings on 8 devices and reads
# the collectives XLA inserted straight from the compiled HLO: the Megatron sharding, two "wrong"
# ones, the gradient, and a 2-D (data, model) mesh. Each result is checked against an unsharded
# float64 computation first.

# %%
import os

import jax

# The device count must be fixed before JAX starts its backend, i.e. before the first JAX operation.
N_DEVICES = 8
try:
    jax.config.update("jax_num_cpu_devices", N_DEVICES)
except AttributeError:  # a JAX without this option: the XLA flag, read when the CPU client starts
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={N_DEVICES}"
jax.config.update("jax_platforms", "cpu")  # always host devices, on a GPU machine too (see below)

import re  # noqa: E402
from collections import Counter  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from demos.harness.run import start  # noqa: E402

run = start(
    "jax_sharding",
    title="Tensor-parallel MLP in JAX: shardings and the collectives XLA inserts",
    sizes={  # (batch, hidden, FFN width)
        "tiny": (16, 64, 256),
        "small": (256, 512, 2048),
        "full": (1024, 1024, 4096),
    },
)
batch, hidden, ffn_width = run.sizes
devices = jax.devices()
run.check("host_devices", len(devices) == N_DEVICES and all(d.platform == "cpu" for d in devices),
          f"JAX {jax.__version__} sees {len(devices)} {devices[0].platform} device(s), {N_DEVICES} wanted")

# %% [markdown]
# The 8 devices are *host* CPU devices: XLA's CPU client split into 8 logical devices that share this
# machine's cores (2 on the machine of the CPU record). They are real SPMD devices as far as the
# compiler is concerned (each runs its own shard of the program, and the collectives really move
# data between their buffers), which is all this demo needs: it studies what the compiler inserts,
# not how fast 8 CPUs would be. This demo runs on host devices on a GPU machine too: sharding needs
# several accelerators, and the GPU machine has one.

# %%
if run.device.is_gpu:
    run.not_run("sharding across GPUs", f"{torch.cuda.device_count()} GPU(s) on this machine, {N_DEVICES} needed; "
                f"the demo ran on {N_DEVICES} host CPU devices instead")

# %% [markdown]
# ## The function, its inputs, the reference
#
# One MLP block, written for one device; nothing in it mentions devices or collectives. The loss for
# the gradient is `0.5 * sum(y^2)`, nonlinear in y so the forward's full output is needed. The
# reference runs in float64 PyTorch (forward and autograd) without any sharding.

# %%
def mlp(x, w1, w2):
    return jax.nn.gelu(x @ w1, approximate=False) @ w2


def loss(x, w1, w2):
    return 0.5 * jnp.sum(mlp(x, w1, w2) ** 2)


mlp_grad = jax.grad(loss, argnums=(0, 1, 2))
weights_grad = jax.grad(loss, argnums=(1, 2))  # what a first layer needs: no dL/dx

generator = torch.Generator().manual_seed(run.options.seed)
x64 = torch.randn(batch, hidden, generator=generator, dtype=torch.float64)
w1_64 = torch.randn(hidden, ffn_width, generator=generator, dtype=torch.float64) * hidden ** -0.5
w2_64 = torch.randn(ffn_width, hidden, generator=generator, dtype=torch.float64) * ffn_width ** -0.5
inputs64 = [t.clone().requires_grad_() for t in (x64, w1_64, w2_64)]
y_reference = F.gelu(inputs64[0] @ inputs64[1]) @ inputs64[2]
(0.5 * (y_reference ** 2).sum()).backward()
reference = {"forward": y_reference.detach(),
             "grad": {f"d{name}": t.grad for name, t in zip(("x", "w1", "w2"), inputs64)}}
reference["grad_weights"] = {name: reference["grad"][name] for name in ("dw1", "dw2")}
inputs = [jnp.asarray(t.numpy(), dtype=jnp.float32) for t in (x64, w1_64, w2_64)]
TOLERANCE = dict(rtol=1e-4, atol=1e-4)  # float32 on any sharding vs float64


def gradient_tolerance(ref):
    """Gradients are sums over the batch with cancellation: absolute error against their largest entry."""
    return dict(rtol=TOLERANCE["rtol"], atol=TOLERANCE["atol"] * max(1.0, float(ref.abs().max())))


# %% [markdown]
# ## The shardings
#
# A 1-D mesh of the 8 devices with one axis, `"model"`; and a 2-D mesh of shape (2, 4) with axes
# `("data", "model")`. `P(None, "model")` splits an array's second dimension over `"model"` and
# replicates it over any other axis; `P()` is fully replicated.
#
# - **megatron**: x replicated, W1 by columns `P(None, "model")`, W2 by rows `P("model", None)`: each
#   device computes `gelu(x @ W1[:, shard])` (GELU is elementwise, so the column split needs no
#   communication) and a partial `@ W2[shard, :]`; the partial sums must be added: expect one
#   all-reduce of the [batch, hidden] output;
# - **wrong.w2_columns**: W2 by columns too. The hidden activation is split by columns but the second
#   matmul needs all of it, and the output comes out split by columns: expect all-gathers;
# - **wrong.w1_rows**: W1 by rows. Each device holds a slice of W1's rows, so the first matmul gives
#   partial sums *before* the GELU, which cannot be applied to partial sums; XLA has to move data
#   before it can compute;
# - **megatron.grad**: `jax.grad` of the loss under the Megatron sharding, gradients sharded like
#   their parameters: the backward of "replicated x feeds column-split W1" is a sum over shards of
#   dL/dx, the backward all-reduce (Megatron's *g* operator);
# - **megatron.grad_weights**: the same, differentiated with respect to W1 and W2 only (as for a
#   first layer, whose input needs no gradient): the control that shows which all-reduce is dL/dx's;
# - **mesh2d** and **mesh2d.grad**: the Megatron sharding on the (2, 4) mesh with the batch split over
#   `"data"`: tensor parallelism inside groups of 4, data parallelism across the 2 groups.

# %%
mesh_1d = Mesh(np.array(devices), ("model",))
mesh_2d = Mesh(np.array(devices).reshape(2, N_DEVICES // 2), ("data", "model"))
COLUMNS, ROWS = P(None, "model"), P("model", None)
CASES = {  # name: (function, mesh, (x, W1, W2) specs, output spec(s), what is compared with the reference)
    "megatron": (mlp, mesh_1d, (P(), COLUMNS, ROWS), P(), "forward"),
    "wrong.w2_columns": (mlp, mesh_1d, (P(), COLUMNS, COLUMNS), P(), "forward"),
    "wrong.w1_rows": (mlp, mesh_1d, (P(), ROWS, ROWS), P(), "forward"),
    "megatron.grad": (mlp_grad, mesh_1d, (P(), COLUMNS, ROWS), (P(), COLUMNS, ROWS), "grad"),
    "megatron.grad_weights": (weights_grad, mesh_1d, (P(), COLUMNS, ROWS), (COLUMNS, ROWS), "grad_weights"),
    "mesh2d": (mlp, mesh_2d, (P("data", None), COLUMNS, ROWS), P("data", None), "forward"),
    "mesh2d.grad": (mlp_grad, mesh_2d, (P("data", None), COLUMNS, ROWS), (P("data", None), COLUMNS, ROWS), "grad"),
}


def compile_case(fn, mesh, in_specs, out_specs):
    """jit with the given shardings; returns the jitted function, inputs placed on their shards, and
    the optimized HLO text of the compiled program."""
    in_shardings = tuple(NamedSharding(mesh, spec) for spec in in_specs)
    out_shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), out_specs,
                                 is_leaf=lambda s: isinstance(s, P))
    jitted = jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings)
    placed = [jax.device_put(a, s) for a, s in zip(inputs, in_shardings)]
    return jitted, placed, jitted.lower(*placed).compile().as_text()


compiled = {name: compile_case(fn, mesh, ins, outs) for name, (fn, mesh, ins, outs, _) in CASES.items()}

# %% [markdown]
# ## Correctness first
#
# Every sharded program (and the unsharded `jax.jit` on one device) against the float64 reference,
# elementwise |err| <= 1e-4 + 1e-4 |ref| (float32 against float64); gradients are sums over the batch
# in which terms cancel, so their absolute tolerance is 1e-4 times their largest entry. Also where the
# shards really are: under the Megatron sharding each device holds a [hidden, ffn/8]
# slice of W1 and an [ffn/8, hidden] slice of W2.

# %%
def to_torch(a):
    return torch.from_numpy(np.array(a))  # a copy: JAX's buffers are read-only


unsharded = jax.jit(mlp)
run.check_close("unsharded", to_torch(unsharded(*inputs)), reference["forward"], **TOLERANCE)
for name, (jitted, placed, _) in compiled.items():
    got, expected = jitted(*placed), reference[CASES[name][4]]
    if isinstance(expected, dict):  # gradients, one check each
        for (grad_name, ref), g in zip(expected.items(), got):
            run.check_close(f"{name}.{grad_name}", to_torch(g), ref, **gradient_tolerance(ref))
    else:
        run.check_close(name, to_torch(got), expected, **TOLERANCE)
_, (_, w1_placed, w2_placed), _ = compiled["megatron"]
w1_shards = {tuple(s.data.shape) for s in w1_placed.addressable_shards}
w2_shards = {tuple(s.data.shape) for s in w2_placed.addressable_shards}
run.check("megatron.shards", len(w1_placed.addressable_shards) == N_DEVICES
          and w1_shards == {(hidden, ffn_width // N_DEVICES)} and w2_shards == {(ffn_width // N_DEVICES, hidden)},
          f"each of the {len(w1_placed.addressable_shards)} devices holds W1 {w1_shards.pop()} of "
          f"{tuple(w1_placed.shape)} and W2 {w2_shards.pop()} of {tuple(w2_placed.shape)}")

# %% [markdown]
# ## The collectives XLA inserted
#
# Read from the optimized HLO of each compiled program (`jitted.lower(...).compile().as_text()`): every
# instruction whose opcode is one of the five collectives (`all-reduce`, `all-gather`,
# `reduce-scatter`, `all-to-all`, `collective-permute`, or their asynchronous `-start` halves), with
# its result shape (the per-device buffer; a tuple when XLA combined several into one) and its
# replica groups (which devices take part together).

# %%
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
DTYPE_BYTES = {"f64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s8": 1, "u8": 1, "pred": 1}
INSTRUCTION = re.compile(r"%\S+ = (.+?) (" + "|".join(COLLECTIVES) + r")(?:-start)?\(")


def buffer_bytes(shape_text):
    """'f32[16,64]{1,0}' or a tuple of them -> total bytes."""
    total = 0
    for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shape_text):
        total += DTYPE_BYTES.get(dtype, 4) * int(np.prod([int(d) for d in dims.split(",") if d] or [1]))
    return total


def group_size(line):
    """Devices per replica group: '{{0,1,2,3},{4,5,6,7}}' -> 4; "mesh['axis_0'=1,'axis_1'=8] {'axis_1'}" -> 8."""
    explicit = re.search(r"replica_groups=\{\{([\d,]+)\}", line)
    if explicit:
        return len(explicit.group(1).split(","))
    named = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
    if named:
        sizes = dict(re.findall(r"'(\w+)'=(\d+)", named.group(1)))
        return int(np.prod([int(sizes[a]) for a in re.findall(r"'(\w+)'", named.group(2))]))
    return None


def short_shape(shape_text):
    """Layouts dropped, and a tuple of equal shapes written once: '(8 x f32[64,1,256])'."""
    shapes = re.findall(r"\b[a-z]+\d*\[[\d,]*\]", shape_text)
    if len(shapes) > 1 and len(set(shapes)) == 1:
        return f"({len(shapes)} x {shapes[0]})"
    return shapes[0] if len(shapes) == 1 else "(" + ", ".join(shapes) + ")"


def collectives_in(hlo):
    found = []
    for line in hlo.splitlines():
        match = INSTRUCTION.search(line)
        if match:
            shape, kind = match.groups()
            short = re.sub(r",? (metadata=\{[^}]*\}|channel_id=\d+|use_global_device_ids=true)", "", line.strip())
            found.append({"kind": kind, "shape": short_shape(shape), "bytes": buffer_bytes(shape),
                          "group": group_size(line), "line": short if len(short) <= 200 else short[:197] + "..."})
    return found


rows, hlo_lines = [], []
for name, (_, mesh, in_specs, _, _) in CASES.items():
    found = collectives_in(compiled[name][2])
    counts = Counter(c["kind"] for c in found)
    for kind in COLLECTIVES:
        run.metric(f"{name}.{kind.replace('-', '_')}", counts[kind], "collectives",
                   label=f"{name}: {kind} instructions in the compiled HLO")
    run.metric(f"{name}.collective_bytes", sum(c["bytes"] for c in found), "B",
               label=f"{name}: total size of the collectives' per-device result buffers")
    specs = ", ".join(f"{arg} {spec}" for arg, spec in zip(("x", "W1", "W2"), in_specs))
    hlo_lines.append(f"# {name}: mesh {dict(mesh.shape)}; {specs}")
    hlo_lines += [c["line"] for c in found] or ["(no collective)"]
    for c in found or [{"kind": "none", "shape": "", "bytes": 0, "group": None}]:
        rows.append([name, specs, c["kind"], c["shape"], c["group"], c["bytes"]])
bytes_of = {name: run.metrics[f"{name}.collective_bytes"]["value"] for name in CASES}
run.metric("wrong.w2_columns.bytes_over_megatron", bytes_of["wrong.w2_columns"] / bytes_of["megatron"], "x",
           label="collective buffer bytes with W2 split by columns over those of the Megatron sharding")
run.table("collectives", f"Collectives in the compiled HLO, x [{batch}, {hidden}], W1 [{hidden}, {ffn_width}], "
          f"W2 [{ffn_width}, {hidden}], float32, 8 host devices",
          ["case", "input shardings", "collective", "per-device result shape", "devices per group",
           "result bytes per device"], rows)
run.artifact("collectives_hlo", "\n".join(hlo_lines))
for line in hlo_lines:
    run.log("  " + line)

# %% [markdown]
# What to read in the table (the test asserts the first three):
#
# - **megatron**: exactly one all-reduce, of the [batch, hidden] output, over all 8 devices, and no
#   all-gather: the Megatron sharding is the one where the only communication is that sum.
# - **wrong.w2_columns**: no all-reduce but all-gathers instead: the [batch, ffn] activation gathered
#   before the second matmul (4x the bytes of the output when ffn = 4 x hidden) and the output
#   gathered to replicate it.
# - **megatron.grad**: two all-reduces of [batch, hidden], the forward's and the backward's (dL/dx);
#   the weight gradients need none: each device's dW1 and dW2 slices come from data it already holds.
#   **megatron.grad_weights**, without dL/dx, keeps only the forward's one.
# - **mesh2d**: the same single all-reduce, but in groups of 4 (the `"model"` axis) on [batch/2,
#   hidden]; its gradient adds an all-reduce of the weight gradients across the `"data"` axis
#   (groups of 2): the data-parallel gradient sum, which XLA combines into one instruction.
# - **wrong.w1_rows**: XLA is free to choose here, and the table shows what it chose. Where it shows an
#   all-to-all whose buffers add up to one W1 shard followed by the Megatron all-reduce, the
#   partitioner resharded the *weight* from rows to columns (cheaper than moving activations at
#   this batch size) and then ran the Megatron program.

# %% [markdown]
# ## Time on host devices (a caveat more than a measurement)
#
# The jitted Megatron forward on 8 host devices against the unsharded jit on one. The 8 devices share
# the machine's cores, and their all-reduce is a memory copy, so this shows the cost of the SPMD
# machinery at this size, not what 8 accelerators would gain.

# %%
def timed(fn, args):
    return run.time(lambda: jax.block_until_ready(fn(*args)))


sharded_jit, sharded_inputs, _ = compiled["megatron"]
time_unsharded = timed(unsharded, inputs)
time_sharded = timed(sharded_jit, sharded_inputs)
run.metric("time.unsharded_ms", time_unsharded.median_s * 1e3, "ms", label="unsharded jitted forward, one host device")
run.metric("time.megatron_ms", time_sharded.median_s * 1e3, "ms",
           label=f"Megatron-sharded jitted forward on {N_DEVICES} host devices sharing the machine's cores")
run.metric("time.megatron_over_unsharded", time_sharded.median_s / time_unsharded.median_s, "x",
           label="sharded forward time over unsharded (host devices: no speedup expected)")
run.table("time", "Jitted forward on host devices (they share the CPU's cores)",
          ["program", "median (ms)", "p10-p90 (ms)"],
          [[label, round(t.median_s * 1e3, 3), f"{t.p10_s * 1e3:.3f}-{t.p90_s * 1e3:.3f}"]
           for label, t in (("unsharded, 1 device", time_unsharded), (f"megatron, {N_DEVICES} devices", time_sharded))])
run.save()
