# %% [markdown]
# # Function transforms: per-example gradients with vmap, and grad vs .backward()
#
# JAX's core idea is that `grad`, `vmap` and `jit` are transformations that take a function and
# return a function, and that they compose. Per-example gradients (each example's own gradient,
# not their mean; DP-SGD clips them, influence and data-selection methods read them) are the
# textbook case: `vmap(grad(loss_of_one_example))`. Without `vmap` they take a Python loop of B
# backward passes. PyTorch gained the same transforms in `torch.func` (formerly functorch).
#
# This demo checks that the loop and `vmap` give the same gradients in both frameworks, times
# them over batch sizes, and then shows the semantic difference between `jax.grad` of a pure
# function and `.backward()` on a module, measured rather than described.

# %%

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.func import functional_call

from demos.harness.run import start
from records.numbers import fmt_speedup_words

run = start(
    "transforms",
    title="Per-example gradients: Python loop vs vmap, in PyTorch and JAX",
    sizes={  # batch sizes swept; hidden width of the MLP
        "tiny": {"batches": [4, 8], "hidden": 32},
        "small": {"batches": [8, 32, 128], "hidden": 128},
        "full": {"batches": [64, 256, 1024], "hidden": 4096},
    },
    cpu_threads=1,
)
device = run.torch_device
BATCHES, HIDDEN = run.sizes["batches"], run.sizes["hidden"]


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")  # full float32 on GPUs too, as PyTorch
JAX_ON_DEVICE = (jax.default_backend() == "gpu") == run.device.is_gpu

# %% [markdown]
# ## One model, with its parameters in both frameworks
#
# The digits MLP (64 inputs, tanh hidden layer, 10 classes). JAX gets the PyTorch module's
# parameters as a plain dict with the same names and layouts, so gradients compare key by key.

# %%
images, labels = load_digits(return_X_y=True)
images = (images / 16.0).astype(np.float32)
torch.manual_seed(run.options.seed)
model = torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 10)).to(device)
params = {name: p.detach() for name, p in model.named_parameters()}  # "0.weight", "0.bias", "2.weight", "2.bias"
jax_params = {name: jnp.asarray(p.cpu().numpy()) for name, p in params.items()}


def batch(b, offset=0):
    """b images and labels, as torch tensors on the device and as JAX arrays."""
    x, y = images[offset:offset + b], labels[offset:offset + b]
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device), jnp.asarray(x), jnp.asarray(y)


# %% [markdown]
# ## Four ways to get B per-example gradients
#
# **PyTorch, a loop:** B forward and backward passes of one example each, copying `.grad` out
# after each. **PyTorch, `torch.func`:** the loss of *one* example as a function of the
# parameters (`functional_call` runs the module with parameters passed in), `grad` of it, and
# `vmap` over the batch. **JAX, a loop:** the jitted `grad` of one example, called B times from
# Python. **JAX, `vmap`:** `jit(vmap(grad(loss_of_one)))`, one compiled program for the batch.

# %%
def torch_loop(x, y):
    grads = {name: [] for name in params}
    for i in range(len(x)):
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        for name, p in model.named_parameters():
            grads[name].append(p.grad)
    return {name: torch.stack(g) for name, g in grads.items()}


def torch_loss_of_one(p, x, y):
    return F.cross_entropy(functional_call(model, p, (x[None],)), y[None])


torch_vmap = torch.func.vmap(torch.func.grad(torch_loss_of_one), in_dims=(None, 0, 0))


def jax_loss_of_one(p, x, y):
    h = jnp.tanh(p["0.weight"] @ x + p["0.bias"])
    return -jax.nn.log_softmax(p["2.weight"] @ h + p["2.bias"])[y]


jax_grad_of_one = jax.jit(jax.grad(jax_loss_of_one))
jax_vmap = jax.jit(jax.vmap(jax.grad(jax_loss_of_one), in_axes=(None, 0, 0)))


def jax_loop(p, x, y):
    grads = [jax_grad_of_one(p, x[i], y[i]) for i in range(len(x))]
    return jax.tree.map(lambda *g: jnp.stack(g), *grads)


VARIANTS = {
    "torch_loop": ("PyTorch, Python loop of .backward()", lambda tx, ty, jx, jy: torch_loop(tx, ty)),
    "torch_vmap": ("PyTorch, torch.func.vmap(grad)", lambda tx, ty, jx, jy: torch_vmap(params, tx, ty)),
    "jax_loop": ("JAX, Python loop of jit(grad)", lambda tx, ty, jx, jy: jax_loop(jax_params, jx, jy)),
    "jax_vmap": ("JAX, jit(vmap(grad))", lambda tx, ty, jx, jy: jax_vmap(jax_params, jx, jy)),
}

# %% [markdown]
# ## Correctness: every variant against a float64 loop
#
# The reference is the PyTorch loop run on a float64 copy of the model on the CPU: an
# independent path (the autograd tape, one example at a time) at higher precision. Every variant
# must match it within float32 tolerances, for every parameter, at the largest batch size.

# %%
def as_torch(grads):
    return {name: g if isinstance(g, torch.Tensor) else torch.from_numpy(np.array(g)) for name, g in grads.items()}


check_b = BATCHES[-1]
tx, ty, jx, jy = batch(check_b, offset=len(images) - check_b)  # not the batches that get timed
model_f64 = torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 10)).double()
model_f64.load_state_dict({k: v.double().cpu() for k, v in model.state_dict().items()})
reference = {name: [] for name in params}
for i in range(check_b):
    model_f64.zero_grad(set_to_none=True)
    F.cross_entropy(model_f64(tx[i:i + 1].double().cpu()), ty[i:i + 1].cpu()).backward()
    for name, p in model_f64.named_parameters():
        reference[name].append(p.grad)
reference = {name: torch.stack(g) for name, g in reference.items()}
for variant, (label, fn) in VARIANTS.items():
    grads = as_torch(fn(tx, ty, jx, jy))
    for name in params:
        run.check_close(f"{variant}.{name}", grads[name], reference[name], rtol=1e-4, atol=1e-6,
                        reference_name="float64 loop of .backward()")

# %% [markdown]
# ## Time over batch sizes
#
# The loops grow linearly with B: B tiny backward passes, each paying Python and framework
# overhead. `vmap` turns the batch of per-example computations into batched matrix products, so
# its time should grow far more slowly. JAX's functions compile once per batch size, on the first
# call, which the harness keeps apart from the steady state. Calls run back to back, without a
# cache flush between them (`flush=False`): per-call overhead is the subject here.

# %%
if not JAX_ON_DEVICE:
    run.not_run("jax_loop, jax_vmap (timing)", f"this JAX has no {run.device.kind} backend (it runs on "
                f"{jax.default_backend()}); its gradients were checked, its times would not compare")
timed = [v for v in VARIANTS if JAX_ON_DEVICE or not v.startswith("jax")]
times = {}  # (variant, b) -> Timing


def blocking(fn):
    """JAX dispatches asynchronously: the timed call must wait for the gradients."""
    return lambda *args: jax.block_until_ready(fn(*args))


for b in BATCHES:
    args = batch(b)
    for variant in timed:
        fn = blocking(VARIANTS[variant][1])
        times[variant, b] = run.time(lambda: fn(*args), flush=False)
        run.log(f"  B={b:5d} {variant:11s} {times[variant, b].median_s * 1e3:9.2f} ms")

# %% [markdown]
# ## `grad` of a pure function vs `.backward()` on a module
#
# `.backward()` is a side effect: it *adds* into each parameter's `.grad`. Call it twice without
# `zero_grad()` and the stored gradient doubles (gradient accumulation is built on this). A JAX
# gradient is a return value: calling `jax.grad(f)` twice gives the same arrays twice and changes
# nothing. `torch.func.grad` behaves like JAX's and leaves `.grad` untouched: PyTorch now has both.

# %%
tx, ty, jx, jy = batch(BATCHES[0])
model.zero_grad(set_to_none=True)
F.cross_entropy(model(tx), ty).backward()
first = {name: p.grad.clone() for name, p in model.named_parameters()}
F.cross_entropy(model(tx), ty).backward()  # again, without zero_grad()
for name, p in model.named_parameters():
    run.check_close(f"torch.backward_accumulates.{name}", p.grad, 2 * first[name], rtol=1e-6, atol=0,
                    reference_name="twice the .grad of one .backward()")
run.metric("torch.grad_norm_ratio_after_two_backwards", float(model[0].weight.grad.norm() / first["0.weight"].norm()),
           "x", label="PyTorch: |.grad| after two .backward() calls divided by |.grad| after one (first layer)")


def jax_batch_loss(p, x, y):
    return jnp.mean(jax.vmap(jax_loss_of_one, in_axes=(None, 0, 0))(p, x, y))


g1, g2 = jax.grad(jax_batch_loss)(jax_params, jx, jy), jax.grad(jax_batch_loss)(jax_params, jx, jy)
same = all(bool(jnp.array_equal(g1[k], g2[k])) for k in g1)
run.check("jax.grad_is_pure", same, "two calls of jax.grad give bitwise-equal gradients; the parameters are unchanged")
for name in params:
    run.check_close(f"jax.grad_vs_backward.{name}", torch.from_numpy(np.asarray(g1[name])), first[name],
                    rtol=1e-4, atol=1e-6, reference_name="PyTorch .backward() on the module")

model.zero_grad(set_to_none=True)
func_grads = torch.func.grad(lambda p: F.cross_entropy(functional_call(model, p, (tx,)), ty))(params)
untouched = all(p.grad is None for p in model.parameters())
run.check("torch.func.grad_is_pure", untouched, "torch.func.grad returned gradients and left every .grad as None")
for name in params:
    run.check_close(f"torch.func.grad_vs_backward.{name}", func_grads[name], first[name], rtol=1e-5, atol=1e-7,
                    reference_name="PyTorch .backward() on the module")

# %% [markdown]
# ## Results

# %%
rows = []
for b in BATCHES:
    for variant in timed:
        t = times[variant, b]
        loop = times[variant.replace("vmap", "loop"), b].median_s
        rows.append([b, VARIANTS[variant][0], round(t.median_s * 1e3, 3), f"{t.p10_s * 1e3:.3f}-{t.p90_s * 1e3:.3f}",
                     round(t.median_s * 1e6 / b, 1), round(loop / t.median_s, 1)])
run.table("per_example_grads", f"Per-example gradients of the digits MLP (hidden {HIDDEN}, float32)",
          ["batch", "variant", "median (ms)", "p10-p90 (ms)", "per example (us)", "speedup over the loop"], rows)


def vmap_vs_loop(framework: str) -> str:
    """vmap against the Python loop at the largest batch, in words: '14x faster', '1.5x slower'."""
    speedup = times[f"{framework}_loop", BATCHES[-1]].median_s / times[f"{framework}_vmap", BATCHES[-1]].median_s
    return fmt_speedup_words(speedup)


jax_part = f", {vmap_vs_loop('jax')} in JAX" if "jax_vmap" in timed else ""  # timed only where JAX runs on this device
run.series("per_example_grads", f"Batch {BATCHES[-1]}: vmap {vmap_vs_loop('torch')} than the loop in PyTorch{jax_part}",
           "batch size", "median time (ms)",
           {VARIANTS[v][0]: (BATCHES, [times[v, b].median_s * 1e3 for b in BATCHES], [times[v, b] for b in BATCHES])
            for v in timed},
           x_log=True, y_log=True)
largest = BATCHES[-1]
for framework in ("torch", "jax"):
    if f"{framework}_vmap" not in timed:
        continue
    for kind in ("loop", "vmap"):
        run.metric(f"{framework}_{kind}.ms_largest", times[f"{framework}_{kind}", largest].median_s * 1e3, "ms",
                   label=f"{VARIANTS[f'{framework}_{kind}'][0]}: {largest} per-example gradients")
    run.metric(f"{framework}.vmap_speedup_largest",
               times[f"{framework}_loop", largest].median_s / times[f"{framework}_vmap", largest].median_s, "x",
               label=f"{framework}: vmap over the Python loop, batch {largest}")
    run.metric(f"{framework}.vmap_speedup_smallest",
               times[f"{framework}_loop", BATCHES[0]].median_s / times[f"{framework}_vmap", BATCHES[0]].median_s, "x",
               label=f"{framework}: vmap over the Python loop, batch {BATCHES[0]}")
run.save()
