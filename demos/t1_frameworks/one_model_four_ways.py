# %% [markdown]
# # One model, four ways: NumPy, PyTorch eager, torch.compile, JAX jit
#
# The same two-layer MLP on scikit-learn's bundled digits (8x8 images, 10 classes), trained by
# plain minibatch SGD four ways: NumPy with a hand-written backward pass, PyTorch eager (autograd
# tape), `torch.compile` (the same PyTorch code, captured and compiled), and JAX (`jax.grad` of a
# pure function, the whole step under `jax.jit`). Every variant starts from the same initial
# weights and sees the same minibatches in the same order, so their loss curves must agree to
# float32 rounding. They are checked against a float64 NumPy run of the same algorithm.
#
# Then each variant's training step is timed: its first call apart (for the compiled variants,
# that is the trace and compile) and its steady state.

# %%

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

from demos.harness.run import start

run = start(
    "one_model_four_ways",
    title="One MLP, four ways: NumPy, PyTorch eager, torch.compile, JAX jit",
    sizes={  # hidden width, minibatch size, epochs over the 1437 training images
        "tiny": {"hidden": 32, "batch": 32, "epochs": 1},
        "small": {"hidden": 128, "batch": 64, "epochs": 8},
        "full": {"hidden": 4096, "batch": 256, "epochs": 20},
    },
    cpu_threads=1,
)
device = run.torch_device
HIDDEN, BATCH, EPOCHS = run.sizes["hidden"], run.sizes["batch"], run.sizes["epochs"]
LR = 0.1


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

# JAX would run float32 matmuls in TF32 on recent NVIDIA GPUs by default; PyTorch does not.
# Full float32 in both, so the curves can agree.
jax.config.update("jax_default_matmul_precision", "highest")
JAX_ON_DEVICE = (jax.default_backend() == "gpu") == run.device.is_gpu

# %% [markdown]
# ## Data, initial weights and the order of minibatches: shared by all four
#
# Pixels scaled to [0, 1]; a fixed split of 1437 training and 360 test images. The initial
# weights and the minibatch order come from one NumPy generator and are copied into every
# framework, so nothing random differs between the variants.

# %%
rng = np.random.default_rng(run.options.seed)
images, labels = load_digits(return_X_y=True)
images = (images / 16.0).astype(np.float32)
labels = labels.astype(np.int64)
shuffled = rng.permutation(len(images))
train, test = shuffled[:1437], shuffled[1437:]
N_IN, N_OUT = images.shape[1], 10

init = {
    "W1": (rng.standard_normal((N_IN, HIDDEN)) / np.sqrt(N_IN)).astype(np.float32),
    "b1": np.zeros(HIDDEN, np.float32),
    "W2": (rng.standard_normal((HIDDEN, N_OUT)) / np.sqrt(HIDDEN)).astype(np.float32),
    "b2": np.zeros(N_OUT, np.float32),
}
batches_per_epoch = len(train) // BATCH  # the last partial batch is dropped: every step has one shape
order = np.concatenate([rng.permutation(train)[: batches_per_epoch * BATCH].reshape(-1, BATCH)
                        for _ in range(EPOCHS)])
STEPS = len(order)
run.log(f"{STEPS} steps of {BATCH} images, hidden width {HIDDEN}")

# %% [markdown]
# ## 1. NumPy: forward and backward written by hand
#
# NumPy has no autograd: every gradient is derived on paper and coded. The step is a pure
# function (new arrays in, new arrays out), which is also what JAX will ask for.

# %%
def numpy_forward(p, x):
    h = np.tanh(x @ p["W1"] + p["b1"])
    return h, h @ p["W2"] + p["b2"]


def numpy_loss_and_grads(p, x, y):
    h, logits = numpy_forward(p, x)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(y))
    loss = -log_probs[rows, y].mean()
    d_logits = np.exp(log_probs)  # softmax - one_hot, averaged over the batch
    d_logits[rows, y] -= 1.0
    d_logits /= len(y)
    d_pre = (d_logits @ p["W2"].T) * (1.0 - h * h)  # through tanh
    grads = {"W1": x.T @ d_pre, "b1": d_pre.sum(axis=0), "W2": h.T @ d_logits, "b2": d_logits.sum(axis=0)}
    return loss, grads


def numpy_step(p, x, y):
    loss, grads = numpy_loss_and_grads(p, x, y)
    return {k: p[k] - LR * grads[k] for k in p}, loss


# %% [markdown]
# ## 2. PyTorch eager, and 3. the same code under `torch.compile`
#
# A module owns its parameters; `loss.backward()` walks the tape recorded during the forward pass
# and accumulates into each parameter's `.grad`; the optimizer updates the parameters in place.
# The compiled variant differs by one line: the loss function goes through `torch.compile`, so
# Dynamo captures the forward, AOTAutograd derives the backward graph, and Inductor compiles
# both (C++ on a CPU, Triton on a GPU). The optimizer step stays eager in both.

# %%
class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(N_IN, HIDDEN)
        self.out = torch.nn.Linear(HIDDEN, N_OUT)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x)))


def torch_model(dtype=torch.float32):
    """An MLP holding the shared initial weights (nn.Linear stores W transposed: out x in)."""
    model = MLP().to(device, dtype)
    with torch.no_grad():
        for layer, w, b in ((model.hidden, "W1", "b1"), (model.out, "W2", "b2")):
            layer.weight.copy_(torch.from_numpy(init[w].T))
            layer.bias.copy_(torch.from_numpy(init[b]))
    return model


def torch_loss(model, x, y):
    return F.cross_entropy(model(x), y)


def torch_trainer(loss_fn):
    model = torch_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, x, y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return model, step


# %% [markdown]
# ## 4. JAX: `grad` of a pure function, the whole step under `jit`
#
# Parameters are a plain dict of arrays (a pytree), passed in and returned; nothing is mutated.
# `jax.value_and_grad` turns the loss function into one that also returns its gradient, and
# `jax.jit` traces the whole step once into a jaxpr and has XLA compile it.

# %%
def jax_forward(p, x):
    return jnp.tanh(x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]


def jax_loss(p, x, y):
    log_probs = jax.nn.log_softmax(jax_forward(p, x))
    return -jnp.take_along_axis(log_probs, y[:, None], axis=1).mean()


@jax.jit
def jax_step(p, x, y):
    loss, grads = jax.value_and_grad(jax_loss)(p, x, y)
    return jax.tree.map(lambda w, g: w - LR * g, p, grads), loss


# %% [markdown]
# ## Correctness first: the hand-written gradients
#
# The hand-written backward pass is the one most likely to be wrong, so it is checked against
# PyTorch's autograd in float64 on a batch of training images before anything is trained.

# %%
x64, y64 = images[order[0]].astype(np.float64), labels[order[0]]
_, numpy_grads = numpy_loss_and_grads({k: v.astype(np.float64) for k, v in init.items()}, x64, y64)
reference_model = torch_model(torch.float64).cpu()
torch_loss(reference_model, torch.from_numpy(x64), torch.from_numpy(y64)).backward()
autograd = {"W1": reference_model.hidden.weight.grad.T, "b1": reference_model.hidden.bias.grad,
            "W2": reference_model.out.weight.grad.T, "b2": reference_model.out.bias.grad}
for name in init:
    run.check_close(f"numpy_backward.{name}", torch.from_numpy(numpy_grads[name]), autograd[name],
                    rtol=1e-10, atol=1e-12, reference_name="torch autograd, float64")

# %% [markdown]
# ## Training, four times (and once more in float64)
#
# Each variant's first step is timed on its own with `run.first_call`: NumPy and eager PyTorch
# just run, `torch.compile` and `jax.jit` trace and compile there. Each framework's one-time
# start-up in a fresh process (Inductor's toolchain checks, XLA's client) would land on that
# first step, so it is paid and measured apart on a throwaway function first.

# %%
_, inductor_startup_s = run.first_call(lambda: torch.compile(lambda t: t * 2.0 + 1.0)(torch.randn(8, device=device)))
_, jax_startup_s = run.first_call(lambda: jax.jit(lambda a: a * 2.0 + 1.0)(jnp.ones(8)).block_until_ready())
run.metric("inductor_startup_s", inductor_startup_s, "s", label="Inductor's one-time start-up in a fresh process")
run.metric("jax_startup_s", jax_startup_s, "s", label="JAX/XLA's one-time start-up in a fresh process")


def train_numpy(dtype):
    p = {k: v.astype(dtype) for k, v in init.items()}
    data = images.astype(dtype)
    losses, first_s = [], None
    for i, idx in enumerate(order):
        x, y = data[idx], labels[idx]
        if i == 0:
            (p, loss), first_s = run.first_call(lambda: numpy_step(p, x, y))
        else:
            p, loss = numpy_step(p, x, y)
        losses.append(float(loss))
    accuracy = float((numpy_forward(p, data[test])[1].argmax(axis=1) == labels[test]).mean())
    return np.array(losses), first_s, accuracy


def train_torch(loss_fn):
    """Returns the results and the step function, which the timing below goes on calling."""
    model, step = torch_trainer(loss_fn)
    data, targets, batches = (torch.from_numpy(images).to(device), torch.from_numpy(labels).to(device),
                              torch.from_numpy(order).to(device))
    x0, y0 = data[batches[0]], targets[batches[0]]  # indexing stays outside the first call's time
    first_loss, first_s = run.first_call(lambda: step(x0, y0))
    losses = [first_loss]
    for idx in batches[1:]:
        losses.append(step(data[idx], targets[idx]))
    with torch.no_grad():  # evaluated eagerly: a new shape would make the compiled one compile again
        accuracy = float((model(data[test]).argmax(dim=1).cpu().numpy() == labels[test]).mean())
    return (torch.stack(losses).cpu().numpy().astype(np.float64), first_s, accuracy), step


def train_jax():
    p = {k: jnp.asarray(v) for k, v in init.items()}
    data, targets = jnp.asarray(images), jnp.asarray(labels)
    x0, y0 = jax.block_until_ready((data[order[0]], targets[order[0]]))  # indexing stays outside the timed call
    (p, loss), first_s = run.first_call(lambda: jax.block_until_ready(jax_step(p, x0, y0)))
    losses = [loss]
    for idx in order[1:]:
        p, loss = jax_step(p, data[idx], targets[idx])
        losses.append(loss)
    accuracy = float((np.asarray(jax_forward(p, data[test])).argmax(axis=1) == labels[test]).mean())
    return np.asarray(jnp.stack(losses), dtype=np.float64), first_s, accuracy


reference_losses, _, reference_accuracy = train_numpy(np.float64)
trained = {}  # variant -> (losses, first-call seconds, test accuracy)
trained["numpy"] = train_numpy(np.float32)
trained["torch_eager"], eager_step = train_torch(torch_loss)
trained["torch_compile"], compiled_step = train_torch(torch.compile(torch_loss))
trained["jax_jit"] = train_jax()
VARIANTS = {"numpy": "NumPy, hand-written backward", "torch_eager": "PyTorch eager",
            "torch_compile": "torch.compile", "jax_jit": "JAX jit"}

# %% [markdown]
# ## The curves agree
#
# Four float32 curves against the float64 curve of the same algorithm: they may differ only by
# rounding, which grows slowly over the steps. The tolerance is 1e-4 relative (plus 1e-5
# absolute): four significant digits of the loss, at every step.

# %%
LOSS_TOLERANCE = dict(rtol=1e-4, atol=1e-5)
for variant, (variant_losses, _, _) in trained.items():
    run.check_close(f"loss_curve.{variant}", torch.from_numpy(variant_losses), torch.from_numpy(reference_losses),
                    reference_name="NumPy float64 run of the same steps", **LOSS_TOLERANCE)

# %% [markdown]
# ## Steady-state step time
#
# Each variant goes on training on one fixed minibatch, timed with the harness (warm-up, repeats,
# median and spread), back to back as a training loop runs them: no cache flush between steps
# (`flush=False`), so per-step host overhead shows as it would in training. The compiled
# functions compiled for this shape above, so no compile lands here. NumPy always runs on the
# host CPU; on a GPU run that is what its row means.

# %%
if not JAX_ON_DEVICE:
    run.not_run("jax_jit (timing)", f"this JAX has no {run.device.kind} backend (it runs on {jax.default_backend()}); "
                "its curve was checked, its times would not compare with PyTorch's")

idx = order[0]
p_np = {k: v.copy() for k, v in init.items()}
x_np, y_np = images[idx], labels[idx]
p_jax = {"p": {k: jnp.asarray(v) for k, v in init.items()}}
x_jax, y_jax = jnp.asarray(images[idx]), jnp.asarray(labels[idx])
x_t, y_t = torch.from_numpy(images[idx]).to(device), torch.from_numpy(labels[idx]).to(device)


def jax_step_in_place():
    p_jax["p"], loss = jax_step(p_jax["p"], x_jax, y_jax)
    loss.block_until_ready()  # JAX dispatches asynchronously: wait for the result


step_fns = {"numpy": lambda: numpy_step(p_np, x_np, y_np), "torch_eager": lambda: eager_step(x_t, y_t),
            "torch_compile": lambda: compiled_step(x_t, y_t), "jax_jit": jax_step_in_place}
timings = {}
for variant, fn in step_fns.items():
    if variant == "jax_jit" and not JAX_ON_DEVICE:
        continue
    timings[variant] = run.time(fn, flush=False)
    run.log(f"  {variant:14s} first call {trained[variant][1] * 1e3:9.1f} ms   "
            f"step {timings[variant].median_s * 1e6:9.1f} us")

# %% [markdown]
# ## Results

# %%
rows = []
for variant, label in VARIANTS.items():
    variant_losses, first_s, accuracy = trained[variant]
    timing = timings.get(variant)
    where = "host CPU" if variant == "numpy" else run.device.kind if variant != "jax_jit" else jax.default_backend()
    rows.append([label, where, round(first_s * 1e3, 2),
                 None if timing is None else round(timing.median_s * 1e6, 1),
                 None if timing is None else f"{timing.p10_s * 1e6:.1f}-{timing.p90_s * 1e6:.1f}",
                 round(float(variant_losses[-1]), 5), f"{np.abs(variant_losses - reference_losses).max():.1e}",
                 round(100 * accuracy, 2)])
    run.metric(f"{variant}.first_call_s", first_s, "s", label=f"{label}: first training step (trace + compile for jit)")
    run.metric(f"{variant}.test_accuracy", accuracy, "fraction", label=f"{label}: test accuracy after training")
    run.metric(f"{variant}.loss_max_abs_diff", np.abs(variant_losses - reference_losses).max(), "nats",
               label=f"{label}: largest |loss - float64 loss| over all steps")
    if timing is not None:
        run.metric(f"{variant}.step_us", timing.median_s * 1e6, "us", label=f"{label}: median training step")
        run.metric(f"{variant}.first_call_over_step", first_s / timing.median_s, "x",
                   label=f"{label}: first call divided by a steady-state step")
for variant, timing in timings.items():
    if variant != "torch_eager":
        run.metric(f"{variant}.speedup_over_eager", timings["torch_eager"].median_s / timing.median_s, "x",
                   label=f"{VARIANTS[variant]}: steady-state step, speedup over PyTorch eager")
run.metric("reference.test_accuracy", reference_accuracy, "fraction", label="float64 NumPy run: test accuracy")
run.metric("steps", STEPS, "steps", label="training steps per variant")

run.table("four_ways", f"One training step, four ways (MLP 64-{HIDDEN}-10, batch {BATCH}, float32)",
          ["variant", "runs on", "first call (ms)", "median step (us)", "p10-p90 (us)", "final loss",
           "max |loss - float64|", "test accuracy (%)"], rows)
steps_axis = list(range(1, STEPS + 1))
farthest = max(np.abs(trained[v][0] - reference_losses).max() for v in VARIANTS)
run.series("loss_curves", f"Loss {reference_losses[0]:.2f} to {reference_losses[-1]:.2f} in {STEPS} steps; all four "
           f"within {farthest:.1e} of float64", "step", "cross-entropy (nats)",
           {"float64 reference": (steps_axis, reference_losses.tolist()),
            **{VARIANTS[v]: (steps_axis, trained[v][0].tolist()) for v in VARIANTS}})
run.series("loss_differences", "Distance from the float64 curve (missing points: exactly equal)", "step",
           "|loss - float64 loss| (nats)",
           {VARIANTS[v]: (steps_axis, [d if d > 0 else None for d in np.abs(trained[v][0] - reference_losses)])
            for v in VARIANTS}, y_log=True)
run.save()
