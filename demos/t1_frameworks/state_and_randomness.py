# %% [markdown]
# # State and randomness: a global generator and in-place updates vs keys and pure functions
#
# PyTorch programs are stateful: random numbers come from a global generator that every call
# advances, tensors are updated in place, and `torch.compile` works hard to keep Python's
# semantics (side effects, globals) intact. JAX programs are pure functions: randomness comes
# from keys passed in explicitly, arrays are immutable, and `jax.jit` runs your Python once to
# trace it, so whatever is not an array input is frozen into the compiled program.
#
# Every behaviour below is observed, counted and checked, not described: if a framework changed
# its semantics, a check would fail and no record would be written.
#
# `torch.compile` runs here with `backend="eager"`: Dynamo captures the graph with its guards and
# replays side effects exactly as it does for Inductor, but skips Inductor's code generation,
# which would only add compile time to a demo about semantics.

# %%

import torch

from demos.harness.run import start

run = start(
    "state_and_randomness",
    title="State and randomness: global generator and in-place updates vs keys and pure functions",
    sizes={  # elements of the array updated in place (or not)
        "tiny": {"update_elements": 2**16},
        "small": {"update_elements": 2**24},
        "full": {"update_elements": 2**28},
    },
    cpu_threads=1,
)
device = run.torch_device
N_UPDATE = run.sizes["update_elements"]


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

JAX_ON_DEVICE = (jax.default_backend() == "gpu") == run.device.is_gpu
observations = []  # rows of the summary table: (behaviour, PyTorch, JAX)

# %% [markdown]
# ## 1. Randomness: a global generator vs explicit keys
#
# A dropout mask drawn after `torch.manual_seed`, and the same mask drawn after someone inserts
# one unrelated random call before it (a new layer's initialization, a data augmentation): the
# global generator has moved, so the mask changes. In JAX the mask depends only on the key it is
# given; a new random call uses its own key (split from the root), and the mask stays put.

# %%
SHAPE, KEEP = (256, 256), 0.9
SEED = run.options.seed


def torch_mask(insert_unrelated_draw):
    torch.manual_seed(SEED)
    if insert_unrelated_draw:
        torch.randn(10, device=device)  # somebody else's random numbers
    return torch.rand(SHAPE, device=device) < KEEP


def jax_mask(insert_unrelated_draw):
    root = jax.random.key(SEED)
    dropout_key, other_key = jax.random.split(root)
    if insert_unrelated_draw:
        jax.random.normal(other_key, (10,))  # uses its own key: the dropout key is untouched
    return jax.random.bernoulli(dropout_key, KEEP, SHAPE)


CHANCE_DIFFERENT = 2 * KEEP * (1 - KEEP)  # two independent masks differ on this fraction, on average
torch_changed = float((torch_mask(False) != torch_mask(True)).float().mean())
jax_changed = float(jnp.mean(jax_mask(False) != jax_mask(True)))
run.check("torch.unrelated_draw_changes_mask", torch_changed > CHANCE_DIFFERENT / 2,
          f"{100 * torch_changed:.1f}% of the mask changed after one unrelated draw from the global generator "
          f"(two independent masks differ on {100 * CHANCE_DIFFERENT:.0f}% on average)")
run.check("jax.unrelated_draw_leaves_mask", jax_changed == 0.0, "0 mask elements changed: the key alone decides")
run.metric("torch.mask_changed_fraction", torch_changed, "fraction",
           label="PyTorch: fraction of a dropout mask that changed after one unrelated random call")
run.metric("jax.mask_changed_fraction", jax_changed, "fraction",
           label="JAX: fraction of a dropout mask that changed after one unrelated random call")
run.metric("independent_masks_differ_fraction", CHANCE_DIFFERENT, "fraction",
           label=f"two independent masks with keep probability {KEEP}: expected fraction that differs", origin="computed")
observations.append(["an unrelated random call is inserted before a dropout mask",
                     f"{100 * torch_changed:.1f}% of the mask changes", f"{100 * jax_changed:.1f}% changes"])

# %% [markdown]
# The other side of explicit keys: a reused key repeats its numbers. Two "independent" dropout
# layers given the same key drop exactly the same units, a silent bug that PyTorch's global
# generator cannot have. And under compilation, randomness keeps each framework's semantics:
# a compiled PyTorch function still advances the global generator on every call, while a jitted
# JAX function is a pure function of its key.

# %%
key = jax.random.key(SEED)
reused_equal = float(jnp.mean(jax.random.bernoulli(key, KEEP, SHAPE) == jax.random.bernoulli(key, KEEP, SHAPE)))
run.check("jax.reused_key_repeats", reused_equal == 1.0, "the same key drew the same mask twice: 100% equal")
run.metric("jax.reused_key_equal_fraction", reused_equal, "fraction",
           label="JAX: two masks drawn from one key, fraction equal")
torch_two_layers_equal = float(((torch.rand(SHAPE, device=device) < KEEP) ==
                                (torch.rand(SHAPE, device=device) < KEEP)).float().mean())
observations.append(["two dropout layers draw their masks, one after the other",
                     f"{100 * torch_two_layers_equal:.0f}% equal (the generator advanced; chance level)",
                     f"given the same key: {100 * reused_equal:.0f}% equal; split the key"])

compiled_dropout = torch.compile(lambda t: torch.nn.functional.dropout(t, 1 - KEEP), backend="eager")
ones = torch.ones(SHAPE, device=device)
torch.manual_seed(SEED)
compiled_equal = float((compiled_dropout(ones) == compiled_dropout(ones)).float().mean())
jitted_dropout = jax.jit(lambda k, t: jnp.where(jax.random.bernoulli(k, KEEP, t.shape), t / KEEP, 0.0))
jones = jnp.ones(SHAPE)
jitted_equal = float(jnp.mean(jitted_dropout(key, jones) == jitted_dropout(key, jones)))
run.check("torch.compiled_dropout_is_stateful", compiled_equal < 1 - CHANCE_DIFFERENT / 2,
          f"two calls of a compiled dropout agree on {100 * compiled_equal:.1f}% of elements "
          f"(independent masks: {100 * (1 - CHANCE_DIFFERENT):.0f}% on average)")
run.check("jax.jitted_dropout_is_pure", jitted_equal == 1.0, "two calls with the same key agree on every element")
observations.append(["a compiled / jitted dropout is called twice with the same input",
                     f"{100 * compiled_equal:.1f}% of elements agree", f"{100 * jitted_equal:.0f}% agree"])

# %% [markdown]
# ## 2. In place vs pure
#
# In PyTorch a view shares storage with its base, so an in-place update through one is seen by
# the other, and an optimizer step rewrites the parameters' memory. JAX arrays cannot be
# updated: assignment raises, and `x.at[i].set(v)` returns a new array.

# %%
base = torch.zeros(4, device=device)
view = base[:2]
base.add_(1.0)
run.check("torch.view_sees_in_place_update", bool((view == 1).all()), "after base.add_(1), its view reads 1.0")

layer = torch.nn.Linear(4, 4).to(device)
pointer_before = layer.weight.data_ptr()
layer(torch.randn(2, 4, device=device)).sum().backward()
torch.optim.SGD(layer.parameters(), lr=0.1).step()
run.check("torch.optimizer_updates_in_place", layer.weight.data_ptr() == pointer_before,
          "SGD.step() rewrote the weight in its own memory (same data_ptr before and after)")

x = jnp.zeros(4)
try:
    x[0] = 1.0
    raised = "nothing"
except TypeError as e:
    raised = f"TypeError: {e}"
run.check("jax.assignment_raises", raised.startswith("TypeError"), raised.split(":")[0] + " on x[0] = 1.0")
run.artifact("jax_item_assignment_error", raised)
y = x.at[0].set(1.0)
run.check("jax.at_set_returns_new_array", float(x[0]) == 0.0 and float(y[0]) == 1.0,
          "x.at[0].set(1.0) returned a new array; x still reads 0.0")
observations.append(["x[0] = 1.0", "updates x in place (views see it)", "raises TypeError; x.at[0].set(1.0) copies"])

# %% [markdown]
# **What purity costs, and how `jit` gets it back.** Setting one element of a large array: in
# place in PyTorch; in eager JAX a full copy of the array; under `jax.jit` still a copy, because
# the caller keeps the old array; under `jax.jit` with the argument *donated* (the caller
# promises never to use it again) XLA reuses the buffer and updates it in place. After donation
# the old array is deleted, which is checked. Updates are timed back to back (`flush=False`), as a
# training loop would run them.

# %%
big_torch = torch.zeros(N_UPDATE, device=device)
held = {"array": jnp.zeros(N_UPDATE)}
set_first = jax.jit(lambda a: a.at[0].set(1.0))
set_first_donated = jax.jit(lambda a: a.at[0].set(1.0), donate_argnums=0)

probe = jnp.zeros(8)
set_first_donated(probe)
run.check("jax.donated_input_deleted", probe.is_deleted(), "after a donating call, the donated input array is deleted")


def torch_in_place():
    big_torch[0] = 1.0


def jax_update(update):
    def call():
        held["array"] = update(held["array"])
        held["array"].block_until_ready()  # JAX dispatches asynchronously: wait for the result
    return call


update_variants = {
    "torch_in_place": ("PyTorch: x[0] = 1.0 (in place)", torch_in_place),
    "jax_eager": ("JAX eager: x.at[0].set(1.0)", jax_update(lambda a: a.at[0].set(1.0))),
    "jax_jit": ("JAX jit: x.at[0].set(1.0)", jax_update(set_first)),
    "jax_jit_donated": ("JAX jit, x donated: x.at[0].set(1.0)", jax_update(set_first_donated)),
}
if not JAX_ON_DEVICE:
    run.not_run("jax update (timing)", f"this JAX has no {run.device.kind} backend (it runs on "
                f"{jax.default_backend()}); its times would not compare with PyTorch's")
update_times = {}
for variant, (label, fn) in update_variants.items():
    if variant.startswith("jax") and not JAX_ON_DEVICE:
        continue
    update_times[variant] = run.time(fn, flush=False)
    run.metric(f"update.{variant}.us", update_times[variant].median_s * 1e6, "us",
               label=f"{label}, array of {N_UPDATE:,} float32")
    run.log(f"  {label:42s} {update_times[variant].median_s * 1e6:10.1f} us")
run.check("jax.update_result", float(held["array"][0]) == 1.0 and float(held["array"][1]) == 0.0,
          "after the updates, element 0 reads 1.0 and element 1 reads 0.0")
if "jax_jit_donated" in update_times:
    run.metric("update.copy_over_donated", update_times["jax_jit"].median_s / update_times["jax_jit_donated"].median_s,
               "x", label="JAX: jit without donation (copies) over jit with donation (in place)")

# %% [markdown]
# ## 3. Python side effects under `jit` and `torch.compile`
#
# A function that appends to a Python list, called five times with the same shape and once with a
# new one. `jax.jit` runs the Python body only while tracing: once per new shape, with abstract
# tracers instead of values. `torch.compile` records the list mutation as a side effect and
# replays it after every call, as eager Python would. `jax.debug.callback` is JAX's way to run
# Python at every call.

# %%
jax_log, jax_callback_log, torch_log = [], [], []


@jax.jit
def jax_double(a):
    jax_log.append(repr(a))  # runs while tracing: a is a tracer, not numbers
    jax.debug.callback(lambda v: jax_callback_log.append(float(v)), a[0])
    return a * 2.0


def torch_double(t):
    torch_log.append(t.shape)
    return t * 2.0


torch_double_compiled = torch.compile(torch_double, backend="eager")
CALLS = 5
for _ in range(CALLS):
    jax_double(jnp.ones(3)).block_until_ready()
    torch_double_compiled(torch.ones(3, device=device))
jax_double(jnp.ones(4)).block_until_ready()
torch_double_compiled(torch.ones(4, device=device))
run.check("jax.side_effect_at_trace_time_only", len(jax_log) == 2,
          f"list.append ran {len(jax_log)} times in {CALLS + 1} calls (once per traced shape)")
run.check("jax.debug_callback_every_call", len(jax_callback_log) == CALLS + 1,
          f"jax.debug.callback ran {len(jax_callback_log)} times in {CALLS + 1} calls")
run.check("torch.side_effect_every_call", len(torch_log) == CALLS + 1,
          f"list.append ran {len(torch_log)} times in {CALLS + 1} calls of the compiled function")
run.metric("jax.side_effect_runs", len(jax_log), "runs", label=f"JAX jit: list.append runs in {CALLS + 1} calls")
run.metric("torch.side_effect_runs", len(torch_log), "runs",
           label=f"torch.compile: list.append runs in {CALLS + 1} calls")
run.metric("calls", CALLS + 1, "calls", label="calls of each function (two shapes)")
run.artifact("what_jit_python_sees", "\n".join(jax_log))
observations.append([f"list.append inside the function, {CALLS + 1} calls, 2 shapes",
                     f"runs {len(torch_log)} times (replayed)", f"runs {len(jax_log)} times (at trace time)"])

# %% [markdown]
# **A global read.** A function that multiplies by a module-level `scale`; then `scale` changes.
# `jax.jit` read it once, at trace time, and baked the value into the compiled program as a
# constant: the next call returns a stale result, with no warning. `torch.compile` installed a
# guard on the global; the guard fails, Dynamo recompiles, and the result is right.

# %%
scale = 2.0


@jax.jit
def jax_scaled(a):
    return a * scale


def torch_scaled(t):
    return t * scale


compiles = []


def counting_backend(graph_module, example_inputs):
    """A torch.compile backend that counts the graphs Dynamo hands it and runs them as they are."""
    compiles.append(graph_module)
    return graph_module.forward


torch_scaled_compiled = torch.compile(torch_scaled, backend=counting_backend)
one = torch.ones(1, device=device)
jax_before, torch_before = float(jax_scaled(jnp.ones(1))[0]), float(torch_scaled_compiled(one)[0])
jaxpr_before = jax.make_jaxpr(jax_scaled)(jnp.ones(1))  # the program jit compiled, with scale in it
scale = 3.0
jax_after, torch_after = float(jax_scaled(jnp.ones(1))[0]), float(torch_scaled_compiled(one)[0])
run.check("jax.global_baked_in", jax_before == 2.0 and jax_after == 2.0,
          f"scale changed 2.0 -> 3.0; jax.jit still returns {jax_after} (a constant in the compiled program)")
run.check("torch.global_guarded", torch_before == 2.0 and torch_after == 3.0 and len(compiles) == 2,
          f"scale changed 2.0 -> 3.0; torch.compile returns {torch_after} after {len(compiles)} compiles")
run.metric("jax.global_read_after_change", jax_after, "value",
           label="JAX jit: output for input 1.0 after the global scale changed from 2.0 to 3.0")
run.metric("torch.global_read_after_change", torch_after, "value",
           label="torch.compile: output for input 1.0 after the global scale changed from 2.0 to 3.0")
run.metric("torch.global_read_compiles", len(compiles), "compiles",
           label="torch.compile: graphs compiled, before and after the global changed")
run.artifact("jax_global_as_constant", str(jaxpr_before))
observations.append(["a global read inside the function changes from 2.0 to 3.0",
                     f"returns {torch_after} (guard failed, {len(compiles)} compiles)",
                     f"returns {jax_after} (stale constant)"])

# %% [markdown]
# ## Results

# %%
run.table("semantics", "Observed in this run", ["behaviour", "PyTorch (eager / torch.compile)", "JAX (jit)"],
          observations)
rows = [[update_variants[v][0], round(t.median_s * 1e6, 1), f"{t.p10_s * 1e6:.1f}-{t.p90_s * 1e6:.1f}"]
        for v, t in update_times.items()]
run.table("update_one_element", f"Set one element of an array of {N_UPDATE:,} float32",
          ["variant", "median (us)", "p10-p90 (us)"], rows)
run.save()
