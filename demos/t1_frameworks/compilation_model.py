# %% [markdown]
# # Two compilation models: jax.jit traces the whole function, torch.compile captures what it can
#
# `jax.jit` runs the Python function once with abstract tracers and records every operation into
# a jaxpr, which is lowered to StableHLO and compiled by XLA. The whole function must be
# traceable: Python control flow on array values is an error. `torch.compile` rewrites the
# function's bytecode with TorchDynamo: it captures as much as it can into FX graphs, falls back
# to Python where it cannot (a *graph break*), and guards each graph with checks on its inputs.
#
# This demo keeps the artifacts of both (the jaxpr, the StableHLO, XLA's optimized HLO, Dynamo's
# captured graphs and break reasons) and counts what each model does when the input shape
# changes: how many compiles, at what cost, and why.

# %%
import io
import logging
import re

import numpy as np
import torch

from records.paths import REPO_ROOT
from demos.harness.run import start

run = start(
    "compilation_model",
    title="Compilation models: jax.jit tracing vs torch.compile capture, and recompiles on new shapes",
    sizes={  # hidden width of the MLP; batch sizes met one after the other; bucket for padding
        "tiny": {"hidden": 32, "batches": [4, 6, 12], "bucket": 8},
        "small": {"hidden": 128, "batches": [20, 24, 36], "bucket": 32},
        "full": {"hidden": 4096, "batches": [1000, 1400, 1800], "bucket": 1024},
    },
    cpu_threads=1,
)
device = run.torch_device
HIDDEN, BATCHES, BUCKET = run.sizes["hidden"], run.sizes["batches"], run.sizes["bucket"]


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch._inductor.config  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")  # full float32 on GPUs too, as PyTorch
JAX_ON_DEVICE = (jax.default_backend() == "gpu") == run.device.is_gpu
# Every compile in this demo is cold: no Inductor FX-graph cache hit from an earlier policy.
torch._inductor.config.fx_graph_cache = False


def relative_paths(text: str) -> str:
    return text.replace(str(REPO_ROOT) + "/", "")


def to_torch(a):
    """A PyTorch tensor or a JAX array, as a CPU tensor for the checks."""
    return a.detach().cpu() if isinstance(a, torch.Tensor) else torch.from_numpy(np.array(a))


# %% [markdown]
# ## The function: the digits MLP's forward pass, in both frameworks

# %%
rng = np.random.default_rng(run.options.seed)
weights = {"W1": rng.standard_normal((64, HIDDEN), dtype=np.float32) / 8,
           "b1": np.zeros(HIDDEN, np.float32),
           "W2": rng.standard_normal((HIDDEN, 10), dtype=np.float32) / np.sqrt(HIDDEN, dtype=np.float32),
           "b2": np.zeros(10, np.float32)}
jax_params = {k: jnp.asarray(v) for k, v in weights.items()}


def jax_predict(p, x):
    return jnp.tanh(x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]


def jax_loss(p, x, y):
    return -jnp.take_along_axis(jax.nn.log_softmax(jax_predict(p, x)), y[:, None], axis=1).mean()


def torch_mlp(hidden):
    """The same MLP as a module (the same weights when hidden is the demo's width)."""
    model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 10)).to(device)
    if hidden == HIDDEN:
        with torch.no_grad():
            for layer, w, b in ((model[0], "W1", "b1"), (model[2], "W2", "b2")):
                layer.weight.copy_(torch.from_numpy(weights[w].T))
                layer.bias.copy_(torch.from_numpy(weights[b]))
    return model.eval()


model = torch_mlp(HIDDEN)
x_example = rng.standard_normal((BATCHES[0], 64), dtype=np.float32)

# %% [markdown]
# ## JAX: trace, lower, compile, one stage at a time
#
# `jax.make_jaxpr` shows what tracing recorded; `.lower()` turns it into StableHLO, the portable
# IR handed to XLA; `.compile()` runs XLA, whose optimized HLO shows the fusions it chose. Each
# stage is timed on its own. `jax.grad` is itself a transformation of jaxprs: the gradient's
# jaxpr is a new, longer program, which is counted too.

# %%
x_jax = jnp.asarray(x_example)
jaxpr, trace_s = run.first_call(lambda: jax.make_jaxpr(jax_predict)(jax_params, x_jax))
lowered, lower_s = run.first_call(lambda: jax.jit(jax_predict).lower(jax_params, x_jax))
compiled, compile_s = run.first_call(lambda: lowered.compile())
stablehlo = lowered.as_text()
optimized_hlo = compiled.as_text()
grad_jaxpr = jax.make_jaxpr(jax.grad(jax_loss))(jax_params, x_jax, jnp.zeros(BATCHES[0], jnp.int32))

run.check_close("jax.compiled_matches_numpy", to_torch(compiled(jax_params, x_jax)),
                torch.from_numpy(np.tanh(x_example.astype(np.float64) @ weights["W1"] + weights["b1"])
                                 @ weights["W2"] + weights["b2"]), rtol=1e-5, atol=1e-5,
                reference_name="NumPy float64 forward")

stablehlo_ops = len(re.findall(r"= stablehlo\.\w+", stablehlo))
hlo_body = optimized_hlo[optimized_hlo.find("\n%"):] if "\n%" in optimized_hlo else optimized_hlo
hlo_body = re.sub(r", metadata=\{[^}]*\}", "", hlo_body).strip()  # source locations: noise here
fusions = len(re.findall(r"\bfusion\(", hlo_body))
run.artifact("jaxpr", str(jaxpr))
run.artifact("stablehlo", stablehlo.strip())
run.artifact("optimized_hlo", hlo_body)
run.artifact("jaxpr_of_grad", str(grad_jaxpr))
run.metric("jax.jaxpr_equations", len(jaxpr.eqns), "equations", label="jaxpr of the forward pass: equations")
run.metric("jax.grad_jaxpr_equations", len(grad_jaxpr.eqns), "equations",
           label="jaxpr of jax.grad of the loss: equations")
run.metric("jax.stablehlo_ops", stablehlo_ops, "ops", label="StableHLO of the forward pass: operations")
run.metric("jax.hlo_fusions", fusions, "fusions", label=f"XLA's optimized HLO ({jax.default_backend()}): fusions")
for stage, seconds in (("trace", trace_s), ("lower", lower_s), ("xla_compile", compile_s)):
    run.metric(f"jax.{stage}_s", seconds, "s", label=f"jax.jit stage '{stage}' of the forward pass")
run.log(f"  jaxpr {len(jaxpr.eqns)} equations, StableHLO {stablehlo_ops} ops, HLO {fusions} fusions; "
        f"trace {trace_s * 1e3:.1f} ms, lower {lower_s * 1e3:.1f} ms, compile {compile_s * 1e3:.1f} ms")

# %% [markdown]
# ## PyTorch: what Dynamo captures
#
# `torch._dynamo.explain` runs Dynamo's capture without compiling and reports the graphs, the
# operations in them, and every graph break with its reason. The forward pass is one graph. A
# function with Python control flow on a tensor's value breaks in two graphs (plus Python in
# between) and still runs. The same function under `jax.jit` is an error: the branch would need
# a concrete value, and a tracer has none. JAX's answer is to write the branch as data
# (`jnp.where`) or as a traced conditional (`jax.lax.cond`).

# %%
def torch_predict(x):
    return model(x)


def torch_branchy(x):
    h = model(x)
    if h.sum() > 0:  # needs the value: Dynamo breaks the graph here
        return torch.relu(h)
    return torch.tanh(h)


def jax_branchy(p, x):
    h = jax_predict(p, x)
    if h.sum() > 0:
        return jax.nn.relu(h)
    return jnp.tanh(h)


def jax_branch_as_data(p, x):
    h = jax_predict(p, x)
    return jnp.where(h.sum() > 0, jax.nn.relu(h), jnp.tanh(h))


def explain_text(explained) -> str:
    lines = [f"graphs: {explained.graph_count}, graph breaks: {explained.graph_break_count}, "
             f"ops captured: {explained.op_count}"]
    for i, reason in enumerate(explained.break_reasons):
        frame = reason.user_stack[-1] if reason.user_stack else None
        where = f" at {relative_paths(frame.filename)}:{frame.lineno} `{frame.line}`" if frame else ""
        lines.append(f"break {i + 1}: {reason.reason}{where}")
    for i, graph in enumerate(explained.graphs):
        lines.append(f"--- graph {i + 1} ---\n{graph.code.strip()}")
    return "\n".join(lines)


x_torch = torch.from_numpy(x_example).to(device)
whole = torch._dynamo.explain(torch_predict)(x_torch)
broken = torch._dynamo.explain(torch_branchy)(x_torch)
run.artifact("dynamo_forward", explain_text(whole))
run.artifact("dynamo_graph_break", explain_text(broken))
run.metric("torch.forward.graphs", whole.graph_count, "graphs", label="torch.compile, forward pass: graphs captured")
run.metric("torch.forward.ops", whole.op_count, "ops", label="torch.compile, forward pass: operations captured")
run.metric("torch.branchy.graphs", broken.graph_count, "graphs", label="function with a data-dependent branch: graphs")
run.metric("torch.branchy.graph_breaks", broken.graph_break_count, "breaks",
           label="function with a data-dependent branch: graph breaks")
run.check("torch.forward_is_one_graph", whole.graph_count == 1 and whole.graph_break_count == 0,
          f"{whole.graph_count} graph, {whole.op_count} ops, no break")
run.check("torch.branch_breaks_the_graph", broken.graph_break_count >= 1,
          f"{broken.graph_count} graphs, {broken.graph_break_count} break: {broken.break_reasons[0].reason}")

try:
    jax.jit(jax_branchy)(jax_params, x_jax)
    jax_error = None
except jax.errors.TracerBoolConversionError as e:
    jax_error = f"{type(e).__name__}: {relative_paths(str(e))}"
run.check("jax.branch_on_value_is_an_error", jax_error is not None,
          "jax.jit of the same function raised TracerBoolConversionError")
run.artifact("jax_branch_error", jax_error)
with torch.no_grad():
    torch_branch_result = torch.compile(torch_branchy, backend="eager")(x_torch)
run.check_close("jax.where_matches_torch_branch",
                to_torch(jax.jit(jax_branch_as_data)(jax_params, x_jax)), to_torch(torch_branch_result),
                rtol=1e-5, atol=1e-5, reference_name="torch.compile with the graph break")

# %% [markdown]
# ## New shapes: what each compilation model recompiles
#
# The forward pass meets batch sizes one after the other, each for the first time, as a
# server meets requests of new lengths. For each policy, the compiles are counted (JAX: a list
# append that runs only while tracing; PyTorch: a backend that counts the graphs Dynamo hands
# to Inductor), each first call is timed, and the reasons each framework logs are kept.
#
# - `jax.jit` specializes on every input shape: a new shape is a new trace and a new XLA compile.
# - `jax.jit` on inputs padded up to a multiple of a bucket size compiles once per bucket.
# - `torch.compile(dynamic=False)` specializes too: a failed shape guard, a recompile.
# - `torch.compile()` (the default) compiles the first shape static; when a second shape fails
#   the guard, it recompiles with that dimension symbolic, and later shapes reuse that graph.
# - `torch.compile(dynamic=True)` compiles a symbolic-shape graph from the start.
#
# After the new shapes, each policy's steady-state call at the last batch size is timed back to
# back (`flush=False`). Inductor's start-up in a fresh process is paid first on a throwaway function. Each PyTorch
# policy gets its own hidden width, so that no policy reuses kernels that an earlier one
# compiled (Inductor keeps compiled kernels by their source code).

# %%
_, inductor_startup_s = run.first_call(lambda: torch.compile(lambda t: t * 2.0 + 1.0)(torch.randn(8, device=device)))
run.metric("inductor_startup_s", inductor_startup_s, "s", label="Inductor's one-time start-up in a fresh process")


class LogCapture:
    """Collect what a library logs (here: why it recompiled) while the block runs."""

    def __init__(self, logger_name):
        self.logger, self.buffer = logging.getLogger(logger_name), io.StringIO()
        self.handler = logging.StreamHandler(self.buffer)

    def __enter__(self):
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)

    def text(self):
        return relative_paths(self.buffer.getvalue()).strip()


def padded_to_bucket(x):
    """Rows padded with zeros up to a multiple of BUCKET, on the host, before the array reaches JAX."""
    rows = -(-x.shape[0] // BUCKET) * BUCKET
    return np.pad(x, ((0, rows - x.shape[0]), (0, 0)))


def jax_policy(pad):
    """(compile counter, call on a NumPy batch, the uncompiled reference, the log to capture)"""
    traces = []

    def predict(p, x):
        traces.append(x.shape)  # runs only while tracing
        return jax_predict(p, x)

    jitted = jax.jit(predict)

    def call(x):  # padded rows are computed and ignored: the checks read only the first len(x) rows
        return jitted(jax_params, jnp.asarray(padded_to_bucket(x) if pad else x)).block_until_ready()

    return traces, call, lambda x: jax_predict(jax_params, jnp.asarray(x)), LogCapture("jax")


def torch_policy(dynamic, hidden):
    """(compile counter, call on a NumPy batch, the uncompiled reference, the log to capture)"""
    torch._dynamo.reset()  # forget earlier policies' graphs and the shapes Dynamo saw change
    compiles = []
    inductor = torch._dynamo.lookup_backend("inductor")
    policy_model = torch_mlp(hidden)

    def counting_inductor(graph_module, example_inputs):
        compiles.append(graph_module)
        return inductor(graph_module, example_inputs)

    @torch.compile(backend=counting_inductor, dynamic=dynamic)
    def forward(x):
        return policy_model(x)

    def call(x):
        with torch.no_grad():
            return forward(torch.from_numpy(x).to(device))

    def reference(x):
        with torch.no_grad():
            return policy_model(torch.from_numpy(x).to(device))

    return compiles, call, reference, LogCapture("torch._dynamo")


POLICIES = {
    "jax_jit": ("jax.jit", lambda: jax_policy(pad=False)),
    "jax_jit_padded": (f"jax.jit, batch padded to a multiple of {BUCKET}", lambda: jax_policy(pad=True)),
    "torch_static": ("torch.compile(dynamic=False)", lambda: torch_policy(False, HIDDEN)),
    "torch_default": ("torch.compile() (automatic dynamic)", lambda: torch_policy(None, HIDDEN + 16)),
    "torch_dynamic": ("torch.compile(dynamic=True)", lambda: torch_policy(True, HIDDEN + 32)),
}
if not JAX_ON_DEVICE:
    run.not_run("jax_jit, jax_jit_padded (timing)", f"this JAX has no {run.device.kind} backend (it runs on "
                f"{jax.default_backend()}); its compiles were counted, its times would not compare")
inputs = {b: rng.standard_normal((b, 64), dtype=np.float32) for b in BATCHES}
recompiles, reasons, call_times = {}, {}, {}
torch._logging.set_logs(recompiles=True)
jax.config.update("jax_explain_cache_misses", True)
for policy, (label, make) in POLICIES.items():
    counted, call, reference_fn, capture = make()
    first_calls = []
    with capture:
        for b in BATCHES:
            out, seconds = run.first_call(lambda: call(inputs[b]))
            first_calls.append(seconds)
            run.check_close(f"{policy}.batch{b}", to_torch(out)[:b], to_torch(reference_fn(inputs[b])),
                            rtol=1e-4, atol=1e-5, reference_name="the uncompiled function")
    recompiles[policy] = (len(counted), first_calls)
    reasons[policy] = capture.text()
    if JAX_ON_DEVICE or not policy.startswith("jax"):
        call_times[policy] = run.time(lambda: call(inputs[BATCHES[-1]]), flush=False)
    run.log(f"  {label:45s} {len(counted)} compiles for {len(BATCHES)} shapes, first calls {sum(first_calls):.2f} s")
torch._logging.set_logs()
jax.config.update("jax_explain_cache_misses", False)

run.check("jax.one_trace_per_shape", recompiles["jax_jit"][0] == len(BATCHES),
          f"{recompiles['jax_jit'][0]} traces for {len(BATCHES)} shapes")
run.check("torch.static_one_compile_per_shape", recompiles["torch_static"][0] == len(BATCHES),
          f"{recompiles['torch_static'][0]} compiles for {len(BATCHES)} shapes")
run.check("torch.dynamic_compiles_once", recompiles["torch_dynamic"][0] == 1,
          f"{recompiles['torch_dynamic'][0]} compile for {len(BATCHES)} shapes")

# %% [markdown]
# ## Results

# %%
rows = []
for policy, (label, _) in POLICIES.items():
    count, first_calls = recompiles[policy]
    timing = call_times.get(policy)
    rows.append([label, count, round(sum(first_calls), 3), round(max(first_calls), 3),
                 None if timing is None else round(timing.median_s * 1e6, 1),
                 None if timing is None else f"{timing.p10_s * 1e6:.1f}-{timing.p90_s * 1e6:.1f}"])
    run.metric(f"{policy}.compiles", count, "compiles", label=f"{label}: compiles for {len(BATCHES)} new shapes")
    run.metric(f"{policy}.first_calls_s", sum(first_calls), "s",
               label=f"{label}: total time of the first call at each of {len(BATCHES)} shapes")
    if timing is not None:
        run.metric(f"{policy}.call_us", timing.median_s * 1e6, "us",
                   label=f"{label}: steady-state call at batch {BATCHES[-1]}")
    run.artifact(f"recompile_reasons.{policy}", reasons[policy] or "(nothing logged: no recompile)")
run.table("recompiles", f"Batch sizes {', '.join(map(str, BATCHES))}, met in this order (MLP 64-{HIDDEN}-10 forward)",
          ["policy", "compiles", "first calls, total (s)", "slowest first call (s)", "steady call (us)",
           "p10-p90 (us)"], rows)
run.table("jax_stages", "jax.jit of the forward pass, stage by stage",
          ["stage", "time (ms)", "what it produced"],
          [["trace (make_jaxpr)", round(trace_s * 1e3, 2), f"jaxpr, {len(jaxpr.eqns)} equations"],
           ["lower", round(lower_s * 1e3, 2), f"StableHLO, {stablehlo_ops} operations"],
           ["compile (XLA)", round(compile_s * 1e3, 2), f"optimized HLO, {fusions} fusions"]])
run.series("first_calls", f"Compiles for {len(BATCHES)} new batch sizes: jax.jit {recompiles['jax_jit'][0]}, "
           f"torch.compile() {recompiles['torch_default'][0]}, dynamic=True {recompiles['torch_dynamic'][0]}",
           "batch size (met in this order)", "first call (s)",
           {label: (BATCHES, recompiles[p][1]) for p, (label, _) in POLICIES.items()}, y_log=True)
run.save()
