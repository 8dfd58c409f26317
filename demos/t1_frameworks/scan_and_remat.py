# %% [markdown]
# # lax.scan, jax.checkpoint and custom derivatives: what jit traces, what the backward pass keeps
#
# Three JAX tools that change what the compiler sees rather than what the model computes.
#
# 1. **`lax.scan` against a Python loop.** Under `jax.jit`, a Python `for` loop over L layers runs
#    while tracing and records L copies of the layer: the program, and XLA's compile time, grow
#    with L. `lax.scan` traces the layer once and records one loop whose body XLA compiles once.
# 2. **`jax.checkpoint` (remat) on the scan body.** The backward pass needs each layer's
#    intermediates (the residuals). Without remat the scan stacks them for all L layers; with
#    `jax.checkpoint` it keeps only each layer's input and recomputes the rest during the backward
#    pass; a policy (`dots_saveable`) keeps the matmul outputs and recomputes the cheap elementwise
#    work. XLA's own memory analysis of the compiled program counts the bytes.
# 3. **`jax.custom_vjp` / `jax.custom_jvp`.** Autodiff differentiates the formula as written, and
#    some formulas have a gradient that is nan where the function is perfectly fine: the norm at 0,
#    `log(1 + exp(x))` at large x. A custom rule states the gradient directly.
#
# CPU only: the lessons are compile behaviour, op counts and the compiler's memory accounting.

# %%
import contextlib
import io
import re

import numpy as np
import torch

from demos.harness.run import start
from records.numbers import TITLE_TIE, fmt_speedup_words
from records.paths import REPO_ROOT

run = start(
    "scan_and_remat",
    title="lax.scan vs a Python loop, jax.checkpoint policies, and custom_vjp",
    sizes={  # rows, layer width, hidden width of each block; stack depths swept; scan's unroll factor
        "tiny": {"batch": 4, "width": 8, "hidden": 16, "depths": [2, 4], "unroll": 2},
        "small": {"batch": 32, "width": 64, "hidden": 256, "depths": [4, 16, 64], "unroll": 8},
        "full": {"batch": 128, "width": 256, "hidden": 1024, "depths": [8, 32, 128], "unroll": 8},
    },
    cpu_threads=1,
)
B, D, H = run.sizes["batch"], run.sizes["width"], run.sizes["hidden"]
DEPTHS, UNROLL = run.sizes["depths"], run.sizes["unroll"]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.ad_checkpoint import print_saved_residuals  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
MB = 1e6


def to_torch(a):
    return torch.from_numpy(np.array(a, dtype=np.float64))


# %% [markdown]
# ## The model: a stack of L residual MLP blocks, weights stacked along a leading axis
#
# Each block is `h + gelu(h @ W1 + b1) @ W2` (GELU written out, tanh form, so every elementwise
# step is visible to the compiler). The weights of all L blocks are stacked: `W1` is (L, D, H).
# The Python loop indexes layer i; `lax.scan` slices the same arrays one layer per iteration.

# %%
def gelu(z):
    return 0.5 * z * (1 + jnp.tanh(0.7978845608 * (z + 0.044715 * z ** 3)))


def block(h, w):
    return h + gelu(h @ w["W1"] + w["b1"]) @ w["W2"]


def stack_loop(p, x):
    for i in range(p["W1"].shape[0]):  # runs while tracing: L blocks recorded one after another
        x = block(x, {k: v[i] for k, v in p.items()})
    return x


def stack_scan(p, x, unroll=1):
    return lax.scan(lambda h, w: (block(h, w), None), x, p, unroll=unroll)[0]  # the body is traced once


def make_params(depth, seed):
    rng = np.random.default_rng(seed)
    return {"W1": rng.standard_normal((depth, D, H), dtype=np.float32) / np.float32(np.sqrt(D)),
            "b1": rng.standard_normal((depth, H), dtype=np.float32) * np.float32(0.1),
            "W2": rng.standard_normal((depth, H, D), dtype=np.float32) / np.float32(2 * np.sqrt(H))}


def numpy_stack(p, x):
    """The float64 reference: the same blocks in NumPy, no JAX involved."""
    h = x.astype(np.float64)
    for i in range(p["W1"].shape[0]):
        z = h @ p["W1"][i].astype(np.float64) + p["b1"][i]
        h = h + 0.5 * z * (1 + np.tanh(0.7978845608 * (z + 0.044715 * z ** 3))) @ p["W2"][i].astype(np.float64)
    return h


def jaxpr_equations(jaxpr):
    """Equations of a jaxpr, counting those inside a sub-program (scan's body) too."""
    count = 0
    for eqn in jaxpr.eqns:
        count += 1
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)  # a ClosedJaxpr holds its Jaxpr in .jaxpr
            if hasattr(inner, "eqns"):
                count += jaxpr_equations(inner)
    return count


rng = np.random.default_rng(run.options.seed)
x_np = rng.standard_normal((B, D), dtype=np.float32)
x = jnp.asarray(x_np)

# %% [markdown]
# ## 1. Compile time and program size: the Python loop against `lax.scan`
#
# For each depth L, each variant gets a fresh `jax.jit`, so its first call traces, lowers and has
# XLA compile a program for that L (the process's one-time XLA start-up is paid before, by a
# trivial jit). The first call's output is checked against the NumPy float64 stack, then the
# steady state is timed. The stages are then timed apart, each once: trace (Python to jaxpr), lower
# (jaxpr to StableHLO) and XLA's compile, on a fresh function (a new `jax.jit` of the same one would
# reuse its cached trace and compiled program). The jaxpr and the StableHLO are counted there.
# `unroll=` makes scan put that many copies of the body in each loop iteration: fewer iterations,
# a larger body to compile.

# %%
jax.block_until_ready(jax.jit(lambda a: a + 1)(x))  # XLA's client and compiler start-up, not measured below
VARIANTS = {
    "loop": ("Python loop (unrolled by tracing)", stack_loop),
    "scan": ("lax.scan", stack_scan),
    "scan_unroll": (f"lax.scan, unroll={UNROLL}", lambda p, x: stack_scan(p, x, unroll=UNROLL)),
}
first_call, steady, stage_s, jaxpr_eqns, hlo_ops, outputs = {}, {}, {}, {}, {}, {}
STAGES = ("trace", "lower", "compile")
for depth in DEPTHS:
    p = {k: jnp.asarray(v) for k, v in make_params(depth, run.options.seed + depth).items()}
    reference = to_torch(numpy_stack({k: np.asarray(v) for k, v in p.items()}, x_np))
    for variant, (label, fn) in VARIANTS.items():
        jitted = jax.jit(fn)
        outputs[variant], first_call[variant, depth] = run.first_call(lambda: jax.block_until_ready(jitted(p, x)))
        run.check_close(f"{variant}.depth{depth}", to_torch(outputs[variant]), reference, rtol=1e-4, atol=1e-4,
                        reference_name="NumPy float64 stack")
        steady[variant, depth] = run.time(lambda: jax.block_until_ready(jitted(p, x)), flush=False)
        staged = jax.jit(lambda p, x, fn=fn: fn(p, x))  # a new function: nothing cached for it
        traced, stage_s[variant, depth, "trace"] = run.first_call(lambda: staged.trace(p, x))
        lowered, stage_s[variant, depth, "lower"] = run.first_call(traced.lower)
        _, stage_s[variant, depth, "compile"] = run.first_call(lowered.compile)
        jaxpr_eqns[variant, depth] = jaxpr_equations(traced.jaxpr.jaxpr)
        hlo_ops[variant, depth] = len(re.findall(r"= stablehlo\.\w+", lowered.as_text()))
        run.log(f"  L={depth:4d} {variant:12s} first call {first_call[variant, depth]:7.3f} s ("
                + ", ".join(f"{s} {stage_s[variant, depth, s]:.3f}" for s in STAGES) + "), steady "
                f"{steady[variant, depth].median_s * 1e3:8.3f} ms, jaxpr {jaxpr_eqns[variant, depth]:5d} eqns, "
                f"StableHLO {hlo_ops[variant, depth]:5d} ops")
    run.check_close(f"scan_vs_loop.depth{depth}", to_torch(outputs["scan"]), to_torch(outputs["loop"]),
                    rtol=1e-5, atol=1e-5,
                    reference_name="the Python loop under jit")

deep, shallow = DEPTHS[-1], DEPTHS[0]
run.check("scan.program_size_constant", len({jaxpr_eqns["scan", d] for d in DEPTHS}) == 1,
          "scan's jaxpr equations at L = " + ", ".join(f"{d}: {jaxpr_eqns['scan', d]}" for d in DEPTHS))
run.check("loop.program_size_grows", jaxpr_eqns["loop", deep] >= deep / shallow / 2 * jaxpr_eqns["loop", shallow],
          f"the loop's jaxpr has {jaxpr_eqns['loop', shallow]} equations at L={shallow} and "
          f"{jaxpr_eqns['loop', deep]} at L={deep}")

# %% [markdown]
# ## 2. `jax.checkpoint` on the scan body: temporary memory and step time of loss + grad
#
# The same scan at the largest depth, differentiated. Four bodies: plain (no remat), and
# `jax.checkpoint` with `nothing_saveable` (full remat: keep only the block's input),
# `dots_saveable` (keep the matmul outputs) and `everything_saveable` (a control: save all, so
# only remat's machinery is priced). XLA's `memory_analysis()` of each compiled program gives
# its temporary buffer size; `print_saved_residuals` lists what the forward pass hands to the
# backward pass; the compiled HLO's `dot` count and XLA's flop count show what is recomputed.
# Every policy's gradients must equal the plain body's.

# %%
POLICIES = {
    "none": ("no remat", None),
    "full": ("jax.checkpoint, nothing_saveable", jax.checkpoint_policies.nothing_saveable),
    "dots": ("jax.checkpoint, dots_saveable", jax.checkpoint_policies.dots_saveable),
    "everything": ("jax.checkpoint, everything_saveable", jax.checkpoint_policies.everything_saveable),
}


def make_loss(policy):
    body = block if policy is None else jax.checkpoint(block, policy=policy)

    def loss(p, x):
        return jnp.sum(lax.scan(lambda h, w: (body(h, w), None), x, p)[0] ** 2)
    return loss


p = {k: jnp.asarray(v) for k, v in make_params(deep, run.options.seed).items()}
stats, remat_steps, dots, flops, grads = {}, {}, {}, {}, {}
for policy, (label, checkpoint_policy) in POLICIES.items():
    loss = make_loss(checkpoint_policy)
    compiled = jax.jit(jax.value_and_grad(loss)).lower(p, x).compile()
    stats[policy] = compiled.memory_analysis()
    optimized_hlo = compiled.as_text()
    dots[policy] = len(re.findall(r"\bdot\(", optimized_hlo))
    flops[policy] = (compiled.cost_analysis() or {}).get("flops")
    grads[policy] = jax.block_until_ready(compiled(p, x))
    remat_steps[policy] = run.time(lambda: jax.block_until_ready(compiled(p, x)), flush=False)
    saved = io.StringIO()
    with contextlib.redirect_stdout(saved):
        print_saved_residuals(loss, p, x)
    run.artifact(f"saved_residuals.{policy}", saved.getvalue().replace(str(REPO_ROOT) + "/", "").strip())
    run.log(f"  {label:38s} temp {getattr(stats[policy], 'temp_size_in_bytes', 0) / MB:7.3f} MB, "
            f"step {remat_steps[policy].median_s * 1e3:7.3f} ms, {dots[policy]} dots")

for policy in POLICIES:
    if policy == "none":
        continue
    run.check_close(f"{policy}.loss", to_torch(grads[policy][0]), to_torch(grads["none"][0]), rtol=1e-6, atol=0,
                    reference_name="loss without remat")
    for k in p:
        run.check_close(f"{policy}.grad.{k}", to_torch(grads[policy][1][k]), to_torch(grads["none"][1][k]),
                        rtol=1e-4, atol=1e-6, reference_name="gradient without remat")

HAS_TEMP = all(s is not None and hasattr(s, "temp_size_in_bytes") for s in stats.values())
if not HAS_TEMP:
    run.not_run("memory_analysis (temporary bytes)", f"the {jax.default_backend()} backend returned no memory analysis")
elif all(s.generated_code_size_in_bytes == 0 for s in stats.values()):
    run.not_run("memory_analysis generated_code_size_in_bytes",
                f"the {jax.default_backend()} backend reports 0 for it: its JIT-compiled code is not counted there")
if any(f is None for f in flops.values()):
    run.not_run("cost_analysis flops", f"the {jax.default_backend()} backend returned no flop count")

# %% [markdown]
# ## 3. Custom derivatives: a gradient that autodiff gets wrong
#
# `norm(x) = sqrt(sum(x * x))` is 0 at x = 0, but autodiff multiplies sqrt's derivative there
# (1 / (2 * 0) = inf) by 2x = 0: nan. A `custom_vjp` saves (x, norm) as residuals in its forward
# and returns `g * x / norm` in its backward, 0 at the origin (the smallest subgradient).
# `log(1 + exp(x))` has the gradient `exp(x) / (1 + exp(x))`, which autodiff evaluates as
# (1 / (1 + exp(x))) * exp(x) = 0 * inf = nan once exp(x) overflows float32 (x > 88.7); a `custom_jvp` states it as
# `1 - 1 / (1 + exp(x))` (the JAX tutorial's `log1pexp`). Its value still overflows, and the rule
# loses relative accuracy where exp(x) is tiny; `jnp.logaddexp(x, 0)` (`jax.nn.softplus`) is the
# library's stable form, shown beside it. References: NumPy float64.

# %%
@jax.custom_vjp
def safe_norm(x):
    return jnp.sqrt(jnp.sum(x * x))


def safe_norm_fwd(x):
    n = jnp.sqrt(jnp.sum(x * x))
    return n, (x, n)  # the residuals the backward pass gets


def safe_norm_bwd(residuals, g):
    x, n = residuals
    return (g * x / jnp.where(n > 0, n, 1.0),)  # x is 0 wherever n is, so the gradient there is 0


safe_norm.defvjp(safe_norm_fwd, safe_norm_bwd)


@jax.custom_jvp
def log1pexp(x):
    return jnp.log(1.0 + jnp.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), t * (1.0 - 1.0 / (1.0 + jnp.exp(x)))


points = rng.standard_normal((4, D), dtype=np.float32)
points[0] = 0.0  # the origin
norm_of = lambda v: jnp.sqrt(jnp.sum(v * v))  # noqa: E731
auto_norm_grad = np.asarray(jax.vmap(jax.grad(norm_of))(jnp.asarray(points)))
custom_norm_grad = np.asarray(jax.vmap(jax.grad(safe_norm))(jnp.asarray(points)))
p64 = points.astype(np.float64)
n64 = np.linalg.norm(p64, axis=1, keepdims=True)
norm_reference = np.where(n64 > 0, p64 / np.where(n64 > 0, n64, 1.0), 0.0)
run.check_close("norm.custom_vjp", to_torch(custom_norm_grad), to_torch(norm_reference),
                rtol=1e-5, atol=1e-6, reference_name="float64 x / |x| (0 at the origin)")
run.check_close("norm.autodiff_away_from_zero", to_torch(auto_norm_grad[1:]),
                to_torch(norm_reference[1:]), rtol=1e-5, atol=1e-6, reference_name="float64 x / |x|")
run.check_wrong("norm.autodiff_at_zero", not np.isfinite(auto_norm_grad[0]).any(),
                f"autodiff's gradient at the origin: {auto_norm_grad[0][:3]}...")

xs = np.array([-30.0, -5.0, 0.0, 3.0, 50.0, 89.0, 100.0], np.float32)
auto_sp_grad = np.asarray(jax.vmap(jax.grad(lambda v: jnp.log(1.0 + jnp.exp(v))))(jnp.asarray(xs)))
custom_sp_grad = np.asarray(jax.vmap(jax.grad(log1pexp))(jnp.asarray(xs)))
lae_sp_grad = np.asarray(jax.vmap(jax.grad(lambda v: jnp.logaddexp(v, 0.0)))(jnp.asarray(xs)))
sp_reference = 1.0 / (1.0 + np.exp(-xs.astype(np.float64)))  # the sigmoid, in float64
run.check_close("log1pexp.custom_jvp", to_torch(custom_sp_grad), to_torch(sp_reference),
                rtol=1e-5, atol=1e-6, reference_name="float64 sigmoid")
run.check_close("logaddexp.autodiff", to_torch(lae_sp_grad), to_torch(sp_reference), rtol=1e-5, atol=0,
                reference_name="float64 sigmoid, relative error only")
sp_values = {"log1pexp": np.asarray(log1pexp(jnp.asarray(xs))), "logaddexp": np.asarray(jnp.logaddexp(xs, 0.0))}
run.check_wrong("log1pexp.autodiff_large_x", not np.isfinite(auto_sp_grad[xs > 88.7]).any(),
                f"autodiff's gradient at x = {xs[xs > 88.7].tolist()}: {auto_sp_grad[xs > 88.7].tolist()}")

# %% [markdown]
# ## Results

# %%
rows = []
for depth in DEPTHS:
    for variant, (label, _) in VARIANTS.items():
        t = steady[variant, depth]
        rows.append([depth, label, round(first_call[variant, depth], 3),
                     *(round(stage_s[variant, depth, s], 3) for s in STAGES), round(t.median_s * 1e3, 3),
                     f"{t.p10_s * 1e3:.3f}-{t.p90_s * 1e3:.3f}", jaxpr_eqns[variant, depth], hlo_ops[variant, depth]])
run.table("scan_vs_loop", f"A stack of L blocks ({B}x{D}, hidden {H}, float32), forward under jax.jit",
          ["depth L", "variant", "first call (s)", "trace (s)", "lower (s)", "XLA compile (s)", "steady call (ms)",
           "p10-p90 (ms)", "jaxpr equations", "StableHLO ops"], rows)
loop_over_scan = first_call["loop", deep] / first_call["scan", deep]
compared = ("about as slow as" if 1 / TITLE_TIE < loop_over_scan < TITLE_TIE
            else f"{fmt_speedup_words(1 / loop_over_scan)} than")
run.series("first_calls", f"Depth {deep}: the unrolled loop's first call was {compared} scan's",
           "depth L (blocks)", "first call: trace + compile + run (s)",
           {label: (DEPTHS, [first_call[v, d] for d in DEPTHS]) for v, (label, _) in VARIANTS.items()},
           x_log=True, y_log=True)

for variant, (label, _) in VARIANTS.items():
    run.metric(f"{variant}.first_call_s", first_call[variant, deep], "s",
               label=f"{label}: first-call time (trace, compile, run) at depth {deep}")
    run.metric(f"{variant}.first_call_growth", first_call[variant, deep] / first_call[variant, shallow], "x",
               label=f"{label}: first-call time at depth {deep} over depth {shallow}")
    for stage in STAGES:
        run.metric(f"{variant}.{stage}_s", stage_s[variant, deep, stage], "s",
                   label=f"{label}: {stage} time at depth {deep}, timed apart on a fresh function")
    run.metric(f"{variant}.step_ms", steady[variant, deep].median_s * 1e3, "ms",
               label=f"{label}: steady-state forward time at depth {deep}")
    run.metric(f"{variant}.jaxpr_equations", jaxpr_eqns[variant, deep], "equations", origin="static",
               label=f"{label}: jaxpr equations at depth {deep} (scan's body included)")
    run.metric(f"{variant}.stablehlo_ops", hlo_ops[variant, deep], "ops", origin="static",
               label=f"{label}: StableHLO operations at depth {deep}")
run.metric("loop_over_scan.first_call", loop_over_scan, "x",
           label=f"first-call time at depth {deep}: the Python loop over lax.scan")
run.metric("loop_over_scan.compile", stage_s["loop", deep, "compile"] / stage_s["scan", deep, "compile"], "x",
           label=f"XLA compile time at depth {deep}: the Python loop over lax.scan")
run.metric("scan_over_loop.step", steady["scan", deep].median_s / steady["loop", deep].median_s, "x",
           label=f"steady-state forward time at depth {deep}: lax.scan over the Python loop")

remat_rows = []
for policy, (label, _) in POLICIES.items():
    s, t = stats[policy], remat_steps[policy]
    fields = ([round(s.temp_size_in_bytes / MB, 3), round(s.argument_size_in_bytes / MB, 3),
               round(s.output_size_in_bytes / MB, 3), round(getattr(s, "peak_memory_in_bytes", 0) / MB, 3)]
              if HAS_TEMP else [None] * 4)
    remat_rows.append([label, *fields, round(t.median_s * 1e3, 3), f"{t.p10_s * 1e3:.3f}-{t.p90_s * 1e3:.3f}",
                       dots[policy], None if flops[policy] is None else round(flops[policy] / 1e6, 3)])
    run.metric(f"{policy}.step_ms", t.median_s * 1e3, "ms", label=f"{label}: loss + grad step time at depth {deep}")
    run.metric(f"{policy}.dots", dots[policy], "ops", origin="static",
               label=f"{label}: dot operations in the compiled HLO (each loop body counted once)")
    if HAS_TEMP:
        run.metric(f"{policy}.temp_mb", s.temp_size_in_bytes / MB, "MB", origin="static",
                   label=f"{label}: XLA memory analysis, temporary bytes of the compiled loss + grad")
    if flops[policy] is not None and policy != "none":
        run.metric(f"{policy}.flops_over_none", flops[policy] / flops["none"], "x", origin="static",
                   label=f"{label}: XLA's flop count over no remat's (a loop body counted once: one layer)")
    if policy != "none":
        run.metric(f"{policy}.step_over_none", t.median_s / remat_steps["none"].median_s, "x",
                   label=f"{label}: step time over no remat's")
        if HAS_TEMP:
            run.metric(f"none_over_{policy}.temp", stats["none"].temp_size_in_bytes / s.temp_size_in_bytes, "x",
                       origin="static", label=f"temporary bytes: no remat over {label}")
run.table("remat", f"Loss + grad of the scan at depth {deep}: XLA's memory analysis ({jax.default_backend()}) "
          "and step time by checkpoint policy",
          ["policy", "temp (MB)", "arguments (MB)", "outputs (MB)", "peak_memory_in_bytes (MB)", "step (ms)",
           "p10-p90 (ms)", "dots in compiled HLO", "XLA flop count (M)"], remat_rows)

run.table("custom_derivatives", "Gradients where autodiff fails: autodiff, the custom rule, the float64 reference",
          ["function", "point", "autodiff", "custom rule", "float64 reference", "jnp.logaddexp(x, 0), autodiff"],
          [["norm (custom_vjp)", where, *(f"{float(g):.7g}" for g in grads_at), None] for where, grads_at in
           (("x = 0, first entry", (auto_norm_grad[0, 0], custom_norm_grad[0, 0], norm_reference[0, 0])),
            ("x random, first entry", (auto_norm_grad[1, 0], custom_norm_grad[1, 0], norm_reference[1, 0])))]
          + [["log(1 + exp(x)) (custom_jvp)", f"x = {v:g}", *(f"{float(g):.7g}" for g in (a, c, r, e))]
             for v, a, c, r, e in zip(xs, auto_sp_grad, custom_sp_grad, sp_reference, lae_sp_grad)])  # nan: text
run.metric("norm.autodiff_nonfinite_at_zero", float(np.mean(~np.isfinite(auto_norm_grad[0]))), "fraction",
           label="autodiff gradient of the norm at the origin: fraction of entries nan or inf")
run.metric("norm.custom_vjp_nonfinite", float(np.mean(~np.isfinite(custom_norm_grad))), "fraction",
           label="custom_vjp gradient of the norm, origin included: fraction of entries nan or inf")
run.metric("norm.custom_vjp_max_err", float(np.abs(custom_norm_grad - norm_reference).max()), "abs",
           label="custom_vjp gradient of the norm: largest distance from the float64 reference")
run.metric("log1pexp.autodiff_nonfinite", float(np.mean(~np.isfinite(auto_sp_grad))), "fraction",
           label=f"autodiff gradient of log(1 + exp(x)) at {len(xs)} points: fraction nan or inf")
run.metric("log1pexp.custom_jvp_max_err", float(np.abs(custom_sp_grad - sp_reference).max()), "abs",
           label="custom_jvp gradient of log(1 + exp(x)): largest distance from the float64 sigmoid")
for name, grad_at in (("log1pexp.custom_jvp", custom_sp_grad), ("logaddexp.autodiff", lae_sp_grad)):
    run.metric(f"{name}_max_rel_err", float((np.abs(grad_at - sp_reference) / sp_reference).max()), "relative",
               label=f"{name} gradient: largest relative distance from the float64 sigmoid")
for name, value in sp_values.items():
    run.metric(f"{name}.value_nonfinite", float(np.mean(~np.isfinite(value))), "fraction",
               label=f"{name}'s value at {len(xs)} points (float32): fraction inf or nan")
run.save()
