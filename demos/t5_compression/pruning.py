# %% [markdown]
# # Pruning: unstructured, structured and 2:4 sparsity, and what each does to latency
#
# Pruning sets weights to zero, usually the smallest in magnitude (Han et al., Learning both Weights
# and Connections, 2015), and optionally fine-tunes the rest to recover. *Where* the zeros go decides
# whether anything gets faster:
#
# - **unstructured**: any individual weights. Most accuracy per zero, but a dense kernel multiplies
#   the zeros anyway, and sparse-matrix kernels only win at very high sparsity.
# - **structured**: whole output channels (hidden units). The result is a *smaller dense* model:
#   fewer rows in one matrix and fewer columns in the next, faster with the same dense kernels.
# - **2:4 semi-structured**: in every group of 4 consecutive weights along the input dimension, 2
#   are zero. Exactly 50%, regular enough that NVIDIA's sparse tensor cores (Ampere and newer)
#   store only the 2 kept values plus 2-bit indices and skip the zeros (Mishra et al., Accelerating
#   Sparse Deep Neural Networks, 2021).
#
# Curves of held-out accuracy against sparsity for each, with and without a short fine-tune that
# keeps the pruned weights at zero; then latency of dense vs pruned execution.

# %%
import copy

import numpy as np
import torch
import torch.nn.functional as F

from demos.harness.run import start
from demos.t5_compression._model import MLP, accuracy, digits, fit, trained

run = start(
    "pruning",
    title="Pruning: unstructured, structured and 2:4 sparsity; accuracy curves and real latency",
    sizes={  # (seeds, fine-tune epochs, large layer width, batch rows for the large layer)
        "tiny": ([0, 1], 2, 512, 64),
        "small": ([0, 1, 2], 4, 2048, 128),
        "full": ([0, 1, 2], 4, 8192, 4096),
    },
    cpu_threads=1,
)
seeds, ft_epochs, width, rows = run.sizes
HIDDEN, EPOCHS = 256, 30
x_tr, y_tr, x_te, y_te = digits()
SPARSITIES = [0.5, 0.7, 0.8, 0.9, 0.95]

# %% [markdown]
# ## Three ways to choose the zeros

# %%
def unstructured_mask(w: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Zero exactly round(sparsity * numel) smallest-magnitude weights of this matrix."""
    k = int(round(sparsity * w.numel()))
    mask = torch.ones(w.numel())
    mask[w.abs().flatten().argsort()[:k]] = 0
    return mask.view_as(w)


def two_four_mask(w: torch.Tensor) -> torch.Tensor:
    """In each group of 4 consecutive weights of a row (input dimension), keep the 2 largest."""
    groups = w.abs().reshape(w.shape[0], -1, 4)
    keep = groups.argsort(dim=-1, descending=True)[..., :2]
    return torch.zeros_like(groups).scatter_(-1, keep, 1.0).reshape(w.shape)


def structured_prune(model: MLP, sparsity: float) -> MLP:
    """Remove the hidden units with the smallest incoming-weight L2 norm from every hidden layer:
    a smaller dense MLP (rows of layer i and the matching columns of layer i+1 are dropped)."""
    keep_n = max(1, int(round((1 - sparsity) * model.layers[0].out_features)))
    small = MLP(keep_n, depth=len(model.layers) - 1)
    with torch.no_grad():
        kept_in = torch.arange(model.layers[0].in_features)
        for i, layer in enumerate(model.layers):
            w = layer.weight[:, kept_in]
            kept_out = (torch.arange(layer.out_features) if i == len(model.layers) - 1
                        else w.norm(dim=1).argsort(descending=True)[:keep_n].sort().values)
            small.layers[i].weight.copy_(w[kept_out])
            small.layers[i].bias.copy_(layer.bias[kept_out])
            kept_in = kept_out
    return small.eval()


def masked(model: MLP, mask_fn) -> tuple[MLP, dict]:
    m = copy.deepcopy(model)
    masks = {}
    with torch.no_grad():
        for i, layer in enumerate(m.layers):
            masks[f"layers.{i}.weight"] = mask_fn(layer.weight)
            layer.weight.mul_(masks[f"layers.{i}.weight"])
    return m, masks


def check_pattern(name: str, m: MLP, masks: dict, sparsity: float | None) -> None:
    for i, layer in enumerate(m.layers):
        w = layer.weight
        if sparsity is None:  # 2:4: every group of 4 along a row has at least 2 zeros, and the mask exactly 2
            zeros_per_group = (w.reshape(w.shape[0], -1, 4) == 0).sum(-1)
            mask_per_group = (masks[f"layers.{i}.weight"].reshape(w.shape[0], -1, 4) == 0).sum(-1)
            ok = bool((zeros_per_group >= 2).all()) and bool((mask_per_group == 2).all())
            run.check(f"{name}.layer{i}.two_four", ok, f"all {zeros_per_group.numel()} groups of 4: >= 2 zeros "
                      f"(min {int(zeros_per_group.min())}), mask zeros exactly 2 per group")
        else:
            k = int(round(sparsity * w.numel()))
            run.check(f"{name}.layer{i}.sparsity", int((w == 0).sum()) >= k and int((masks[f'layers.{i}.weight'] == 0).sum()) == k,
                      f"{int((w == 0).sum())} zeros >= {k} requested ({sparsity:.0%} of {w.numel()})")


# %% [markdown]
# ## Accuracy against sparsity, with and without a short fine-tune
#
# The fine-tune runs a few epochs of the same training with the mask re-applied after every step
# (unstructured, 2:4), or simply trains the smaller dense model (structured).

# %%
curves = {}  # (method, fine-tuned) -> {sparsity: [acc per seed]}
ft_seconds = []
for seed in seeds:
    model, info = trained(HIDDEN, seed, EPOCHS, log=run.log)
    dense_acc = accuracy(model, x_te, y_te)
    for method in ("unstructured", "structured", "two_four"):
        for sparsity in ([0.5] if method == "two_four" else SPARSITIES):
            if method == "structured":
                pruned, masks = structured_prune(model, sparsity), None
                if seed == seeds[0] and sparsity == 0.5:
                    with torch.no_grad():  # pruning nothing must give the same function back
                        run.check_close("structured.prune_nothing_is_identity", structured_prune(model, 0.0)(x_te),
                                        model(x_te), rtol=1e-5, atol=1e-5, reference_name="the unpruned model")
                    shapes = [tuple(l.weight.shape) for l in pruned.layers]
                    keep = HIDDEN // 2
                    run.check("structured.smaller_dense_shapes", shapes == [(keep, 64), (keep, keep), (10, keep)],
                              f"50% of hidden units removed: weight shapes {shapes}")
            else:
                fn = two_four_mask if method == "two_four" else (lambda w, s=sparsity: unstructured_mask(w, s))
                pruned, masks = masked(model, fn)
                if seed == seeds[0]:
                    check_pattern(f"{method}.{sparsity:.2f}", pruned, masks, None if method == "two_four" else sparsity)
            curves.setdefault((method, False), {}).setdefault(sparsity, []).append(accuracy(pruned, x_te, y_te))
            info_ft = fit(pruned, x_tr, y_tr, ft_epochs, seed + 200, lr=1e-3, masks=masks)
            ft_seconds.append(info_ft["train_s"])
            if masks is not None and seed == seeds[0]:
                check_pattern(f"{method}.{sparsity:.2f}.after_finetune", pruned, masks,
                              None if method == "two_four" else sparsity)
            curves.setdefault((method, True), {}).setdefault(sparsity, []).append(accuracy(pruned, x_te, y_te))
    curves.setdefault(("dense", False), {}).setdefault(0.0, []).append(dense_acc)

dense_mean = float(np.mean(curves["dense", False][0.0]))
run.metric("acc.dense", dense_mean, "fraction", label=f"unpruned model, mean of {len(seeds)} seeds")
lines, table = {}, []
for (method, tuned), by_s in curves.items():
    if method == "dense":
        continue
    label = f"{method}{' + fine-tune' if tuned else ''}"
    xs = sorted(by_s)
    lines[label] = (xs, [float(np.mean(by_s[s])) for s in xs])
    for s in xs:
        key = f"acc.{method}{'.ft' if tuned else ''}.s{int(round(100 * s))}"
        run.metric(key, float(np.mean(by_s[s])), "fraction", label=f"{label} at {s:.0%} sparsity, mean of {len(seeds)} seeds")
        run.metric(key + "_min", min(by_s[s]), "fraction", label=f"{label} at {s:.0%} sparsity, worst seed")
        table.append([method, "yes" if tuned else "no", s, round(float(np.mean(by_s[s])), 4), round(min(by_s[s]), 4),
                      round(max(by_s[s]), 4)])
at90 = {tuned: float(np.mean(curves["unstructured", tuned][0.9])) for tuned in (False, True)}
run.series("accuracy_vs_sparsity", f"Unstructured at 90% zeros: {at90[False]:.0%} accuracy, {at90[True]:.0%} "
           f"fine-tuned, dense {dense_mean:.0%}", "sparsity (fraction of weights zero)",
           "held-out accuracy", lines, hlines={"dense": dense_mean})
run.table("accuracy", f"Held-out accuracy after pruning ({len(seeds)} seeds; fine-tune: {ft_epochs} epochs)",
          ["method", "fine-tuned", "sparsity", "mean", "min", "max"], table)
run.metric("finetune_s", float(np.mean(ft_seconds)), "s", label=f"one {ft_epochs}-epoch fine-tune, mean")

# %% [markdown]
# ## Latency: zeros in a dense kernel, a sparse kernel, a smaller dense layer
#
# One large linear layer (`width` x `width`, `rows` input rows), fp32:
# dense; the same layer with 90% of its weights zeroed (still a dense matmul); the 90%-zero and a
# 50%-zero weight as CSR sparse matrices (`torch.sparse.mm`, CPU); and the structurally pruned
# layer with half the output channels, a smaller dense matmul.

# %%
device = run.torch_device
w = torch.randn(width, width, device=device) / width**0.5
x = torch.randn(rows, width, device=device)
w90 = w * unstructured_mask(w.cpu(), 0.9).to(device)
w50 = w * unstructured_mask(w.cpu(), 0.5).to(device)
w_half = w[: width // 2].contiguous()
variants = {"dense": lambda: F.linear(x, w), "unstructured90_dense_kernel": lambda: F.linear(x, w90),
            "structured50_smaller_dense": lambda: F.linear(x, w_half)}
if not run.device.is_gpu:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        w90_csr, w50_csr = w90.to_sparse_csr(), w50.to_sparse_csr()
    run.check_close("csr_equals_dense", torch.sparse.mm(w90_csr, x.T).T, F.linear(x, w90), rtol=1e-4, atol=1e-4,
                    reference_name="dense matmul with the same zeros")
    variants["unstructured90_csr_kernel"] = lambda: torch.sparse.mm(w90_csr, x.T)
    variants["unstructured50_csr_kernel"] = lambda: torch.sparse.mm(w50_csr, x.T)
times = {}
for _ in range(3):  # three alternating rounds, the fastest median of each kept: a burst of other work on the
    for name, fn in variants.items():  # machine then cannot land on one variant only
        times[name] = min(times.get(name, float("inf")), run.time(fn).median_s)
for name, t in times.items():
    run.metric(f"latency.{name}_ms", t * 1e3, "ms", label=f"{width}x{width} layer, {rows} rows: {name}")
    run.metric(f"latency.{name}_speedup", times["dense"] / t, "x", label=f"dense time over {name} time")
run.table("latency", f"{width}x{width} fp32 linear layer, {rows} rows: median time",
          ["variant", "ms", "speedup vs dense"], [[n, round(t * 1e3, 3), round(times["dense"] / t, 2)] for n, t in times.items()])

# 2:4 on sparse tensor cores: a GPU with compute capability 8.0+ and fp16/bf16
if run.device.is_gpu and torch.cuda.get_device_capability()[0] >= 8:
    from torch.sparse import to_sparse_semi_structured
    w16 = (w * two_four_mask(w.cpu()).to(device)).half()
    x16 = x.half()
    w24 = to_sparse_semi_structured(w16)
    run.check_close("two_four.sparse_equals_dense", F.linear(x16, w24), F.linear(x16, w16), rtol=2e-2, atol=2e-2,
                    reference_name="dense fp16 matmul with the same zeros")
    t_dense16 = run.time(lambda: F.linear(x16, w16)).median_s
    t_24 = run.time(lambda: F.linear(x16, w24)).median_s
    run.metric("latency.two_four_fp16_ms", t_24 * 1e3, "ms", label="2:4 sparse fp16 (sparse tensor cores)")
    run.metric("latency.dense_fp16_ms", t_dense16 * 1e3, "ms", label="dense fp16, same layer")
    run.metric("latency.two_four_speedup", t_dense16 / t_24, "x", label="dense fp16 time over 2:4 sparse time")
else:
    run.not_run("two_four_sparse_tensor_cores", "2:4 acceleration needs NVIDIA sparse tensor cores (compute capability "
                "8.0+) through torch.sparse.to_sparse_semi_structured; on a CPU there is no 2:4 kernel, so only the "
                "pattern and the accuracy were measured")
run.save()
