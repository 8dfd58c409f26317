# %% [markdown]
# # The same block through JAX: jaxpr, StableHLO, optimized HLO
#
# `jax.jit` traces a Python function with abstract values into a **jaxpr** (JAX's own small IR of
# primitives), lowers it to **StableHLO** (an MLIR dialect with a stable, versioned op set: what
# JAX hands to a compiler), and XLA compiles that: it converts to **HLO**, runs its optimization
# passes (algebraic simplification, layout assignment, fusion, buffer assignment) and emits
# kernels for the target. Before optimization every elementwise op is its own instruction; after
# it, the entry computation is mostly *fusions*, each of which becomes one kernel.
#
# The block here is the PyTorch block of `demos/common/block.py`, rewritten as a pure
# function of its parameters, with the PyTorch weights copied in so both can be checked against
# the same float64 reference.

# %%
import re
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import torch

from demos.common.block import SIZES, make_block, reference_forward
from demos.harness.run import start

run = start("jax_lowering", title="The block through JAX: jaxpr, StableHLO, XLA's optimized HLO", sizes=SIZES)
batch, seq, width, heads = run.sizes

# JAX picks its own device: the CPU, or the GPU when the run is on one and JAX can see it.
jax_gpus = [d for d in jax.devices() if d.platform == "gpu"] if run.device.is_gpu else []
jax_device = jax_gpus[0] if jax_gpus else jax.devices("cpu")[0]
if run.device.is_gpu and not jax_gpus:
    run.not_run("JAX on the GPU", f"this JAX build sees no GPU ({jax.devices()}); the lowering ran on the CPU")
dtype = jnp.bfloat16 if jax_device.platform == "gpu" else jnp.float32
TOLERANCE = dict(rtol=1e-4, atol=1e-4) if dtype == jnp.float32 else dict(rtol=5e-2, atol=5e-2)
run.log(f"JAX {jax.__version__} on {jax_device.platform} ({jax_device.device_kind}), {jnp.dtype(dtype).name}")

# %% [markdown]
# ## The block as a pure function
#
# Parameters are an explicit argument (a dict of arrays), not module state; attention is written
# out with a causal mask, and GELU is the exact (erf) form that PyTorch uses.

# %%
def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * weight + bias


def block_fn(p, x):
    b, t, d = x.shape
    head_dim = d // heads
    h = layer_norm(x, p["ln1.weight"], p["ln1.bias"]) @ p["qkv.weight"].T + p["qkv.bias"]
    q, k, v = h.reshape(b, t, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)
    scores = (q @ k.swapaxes(-1, -2)) / jnp.sqrt(jnp.asarray(head_dim, x.dtype))
    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    attn = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
    y = (attn @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    x = x + y @ p["proj.weight"].T + p["proj.bias"]
    h = layer_norm(x, p["ln2.weight"], p["ln2.bias"]) @ p["fc1.weight"].T + p["fc1.bias"]
    return x + jax.nn.gelu(h, approximate=False) @ p["fc2.weight"].T + p["fc2.bias"]


torch_block = make_block(width, heads, "cpu", torch.float32)
params = {name: jax.device_put(jnp.asarray(t.detach().numpy(), dtype=dtype), jax_device)
          for name, t in torch_block.state_dict().items()}
x_torch = torch.randn(batch, seq, width)
x = jax.device_put(jnp.asarray(x_torch.numpy(), dtype=dtype), jax_device)
reference = reference_forward(torch_block, x_torch)

# %% [markdown]
# ## Stage by stage: jaxpr, StableHLO, HLO before and after XLA's passes
#
# `jax.make_jaxpr` shows the trace; `jit(...).lower(...)` produces the StableHLO module (and the
# same program as HLO, before any optimization); `.compile()` runs XLA, whose optimized HLO
# `as_text()` returns. Lowering and compiling are timed apart from each other and from the steady
# state.

# %%
jaxpr = jax.make_jaxpr(block_fn)(params, x)
jitted = jax.jit(block_fn)
lowered, lower_s = run.first_call(lambda: jitted.lower(params, x))
compiled, compile_s = run.first_call(lambda: lowered.compile())
stablehlo_text = lowered.as_text()
hlo_before = lowered.as_text(dialect="hlo")
hlo_after = compiled.as_text()


def entry_instructions(hlo: str) -> list[str]:
    """The instructions of the HLO module's ENTRY computation (parameters and constants excluded)."""
    body = hlo[hlo.index("ENTRY"):]
    body = body[: body.index("\n}")]
    lines = [line.strip() for line in body.splitlines()[1:] if " = " in line]
    return [line for line in lines if not re.search(r" (parameter|constant)\(", line)]


def opcode(instruction: str) -> str:
    """'%x = f32[4]{0} fusion(%a), kind=kLoop, ...' -> 'fusion:kLoop'; '... dot(...)' -> 'dot'."""
    rhs = instruction.split(" = ", 1)[1]
    op = re.search(r"(?<![\w.])([a-z][a-z0-9_-]*)\(", rhs)  # the first lowercase word before "(": the opcode
    name = op.group(1) if op else "?"
    kind = re.search(r"kind=(k\w+)", rhs)
    target = re.search(r'custom_call_target="([^"]+)"', rhs)
    return f"{name}:{kind.group(1)}" if kind else (f"{name}:{target.group(1)}" if target else name)


stablehlo_ops = Counter(re.findall(r"^\s*(?:[%\w:#, ]+ = )?\"?(stablehlo\.[a-z_]+)", stablehlo_text, re.M))
before, after = entry_instructions(hlo_before), entry_instructions(hlo_after)
after_ops = Counter(opcode(i) for i in after)
fusions = [i for i in after if opcode(i).startswith("fusion")]
run.metric("jaxpr.equations", len(jaxpr.eqns), "equations", label="jaxpr: primitive equations")
run.metric("stablehlo.ops", sum(stablehlo_ops.values()), "ops", label="StableHLO: ops in the module")
run.metric("hlo.before.instructions", len(before), "instructions",
           label="HLO before optimization: entry instructions (no parameters or constants)")
run.metric("hlo.before.fusions", sum(opcode(i).startswith("fusion") for i in before), "fusions",
           label="HLO before optimization: fusions")
run.metric("hlo.after.instructions", len(after), "instructions",
           label="optimized HLO: entry instructions (each a kernel or a library call)")
run.metric("hlo.after.fusions", len(fusions), "fusions", label="optimized HLO: fusions in the entry computation")
run.metric("lower_s", lower_s, "s", label="jit(...).lower: trace to jaxpr and lower to StableHLO")
run.metric("compile_s", compile_s, "s", label="lowered.compile(): XLA optimization and code generation")
run.table("hlo_after", f"Optimized HLO on {jax_device.platform}: what the entry computation runs",
          ["instruction (fusion kind or custom-call target)", "count"], [[k, v] for k, v in after_ops.most_common()])
run.table("stablehlo_ops", "StableHLO ops in the lowered module", ["op", "count"],
          [[k, v] for k, v in stablehlo_ops.most_common()])
run.check("xla.fused", len(fusions) > 0 and len(after) < len(before),
          f"{len(before)} entry instructions before optimization, {len(after)} after, {len(fusions)} of them fusions")

# %% [markdown]
# The artifacts: the first lines of the jaxpr and of the StableHLO module, the optimized entry
# computation, and the body of the largest fusion (the ops XLA put into one kernel).

# %%
def excerpt(text: str, max_lines: int) -> str:
    lines = text.strip("\n").splitlines()
    extra = [f"... ({len(lines) - max_lines} more lines)"] if len(lines) > max_lines else []
    return "\n".join(lines[:max_lines] + extra)


def readable(text: str) -> str:
    """Drop the attributes that only a tool reads (metadata, sharding, backend configs) from IR text."""
    text = re.sub(r" \{sdy\.sharding = #sdy\.sharding<[^>]*>\}", "", text)
    lines = []
    for line in text.splitlines():
        cuts = [i for i in (line.find(", metadata="), line.find(", sharding="), line.find(", frontend_attributes="),
                            line.find(", backend_config=")) if i >= 0]
        lines.append(line[: min(cuts)] if cuts else line)
    return "\n".join(lines)


def computation(hlo: str, name: str) -> str:
    start_at = hlo.index(f"%{name} ")
    return hlo[start_at: hlo.index("\n}", start_at) + 2]


largest = max(fusions, key=lambda i: len(computation(hlo_after, re.search(r"calls=%([\w.-]+)", i).group(1))))
largest_name = re.search(r"calls=%([\w.-]+)", largest).group(1)
run.artifact("jaxpr", excerpt(str(jaxpr), 40))
run.artifact("stablehlo", excerpt(readable(stablehlo_text), 50))
entry_text = hlo_after[hlo_after.index("ENTRY"):]
entry_text = "\n".join(line for line in entry_text[: entry_text.index("\n}") + 2].splitlines() if " parameter(" not in line)
run.artifact("hlo_optimized_entry", excerpt(readable(entry_text), 80))
run.artifact("hlo_largest_fusion", excerpt(readable(computation(hlo_after, largest_name)), 60))

# %% [markdown]
# ## Correctness, then steady state
#
# The compiled function against the float64 reference (the same one the PyTorch demos use), and
# the same function run op by op without `jit` (each primitive dispatched and compiled on its
# own, cached after the first call) as the eager baseline.

# %%
out = compiled(params, x)
run.check_close("jax.jit", torch.from_numpy(np.asarray(out, dtype=np.float64)), reference, **TOLERANCE)
with jax.disable_jit():
    eager_out = block_fn(params, x)
run.check_close("jax.op_by_op", torch.from_numpy(np.asarray(eager_out, dtype=np.float64)), reference, **TOLERANCE)


def op_by_op():
    with jax.disable_jit():
        return block_fn(params, x).block_until_ready()


timings = {"op by op (no jit)": run.time(op_by_op), "jit (XLA)": run.time(lambda: compiled(params, x).block_until_ready())}
run.table("timing", f"Block forward, batch {batch} x seq {seq} x width {width} ({jnp.dtype(dtype).name}, "
          f"{jax_device.platform})", ["variant", "median (us)", "p10-p90 (us)"],
          [[k, round(t.median_s * 1e6, 1), f"{t.p10_s * 1e6:.1f}-{t.p90_s * 1e6:.1f}"] for k, t in timings.items()])
run.metric("timing.op_by_op_us", timings["op by op (no jit)"].median_s * 1e6, "us", label="op by op: median")
run.metric("timing.jit_us", timings["jit (XLA)"].median_s * 1e6, "us", label="jit-compiled: median")
run.metric("timing.jit_speedup", timings["op by op (no jit)"].median_s / timings["jit (XLA)"].median_s, "x",
           label="jit over op by op")

run.save()
