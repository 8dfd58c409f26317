# %% [markdown]
# # ZeRO stages 1, 2 and 3 side by side: memory per rank, step time, the same answer
#
# The ZeRO paper (Rajbhandari et al., [ZeRO: Memory Optimizations Toward Training Trillion Parameter
# Models](https://arxiv.org/abs/1910.02054)) removes the copies data parallelism keeps on every rank
# in three stages: stage 1 shards the optimizer states, stage 2 also the gradients, stage 3 (FSDP)
# also the parameters. With Adam in fp32 (4 bytes of parameter, 4 of gradient, 8 of Adam's two
# moments), per parameter and rank:
#
# | | params | grads | Adam | total |
# |---|---|---|---|---|
# | DDP | 4 | 4 | 8 | 16 |
# | ZeRO-1 | 4 | 4 | 8/p | 8 + 8/p |
# | ZeRO-2 | 4 | 4/p | 8/p | 4 + 12/p |
# | ZeRO-3 / FSDP | 4/p | 4/p | 8/p | 16/p |
#
# (The paper's mixed-precision figures, 2 + 2 + 12 bytes, give 16, 4 + 12/p, 2 + 14/p and 16/p.)
# PyTorch has ZeRO-1 (`ZeroRedundancyOptimizer`) and ZeRO-3 (FSDP) but no ZeRO-2 API, so stages 1
# and 2 are written out here on one flat buffer (`FlatZero`), ZeRO-3 is FSDP2's `fully_shard`, and
# all of them must end at DDP's parameters. Memory is counted from the storages each rank holds at
# the optimizer step (tensor accounting), step time with the harness's timer on every rank.
# `data_parallel.py` has the traffic of each layout; the overlap of DDP's all-reduce with backward,
# read from a profiler trace, is `demos/t8_training/accumulation_and_overlap.py`.

# %%
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from demos.harness.run import start
from demos.t7_parallelism import _dist
from demos.t7_parallelism._dp_model import (LR, close_to, global_batch, make_mlp, my_rows, optimizer_state,
                                            storage_bytes)

_dist.pin_gpu_per_rank()
run = start(
    "zero_stages",
    title="ZeRO-1, ZeRO-2 and FSDP (ZeRO-3) beside DDP: memory per rank, step time, same parameters",
    sizes={  # MLP layers x width (odd, so that shards need padding), global batch, Adam steps, timed repeats
        "tiny": {"layers": 3, "width": 65, "batch": 8, "steps": 2, "repeats": 3},
        "small": {"layers": 6, "width": 257, "batch": 32, "steps": 3, "repeats": 5},
        "full": {"layers": 8, "width": 1025, "batch": 64, "steps": 3, "repeats": 5},
    },
)
cfg = run.sizes
import torch._dynamo  # noqa: E402,F401  DDP imports it on first use: import it once, before the ranks fork
VARIANTS = ("ddp", "zero1", "zero2", "fsdp")
FORMULA = {"ddp": (4, 4, 8), "zero1": (4, 4, 8), "zero2": (4, 4, 8), "fsdp": (4, 4, 8)}  # bytes: param, grad, Adam
SHARDED = {"ddp": (), "zero1": ("adam",), "zero2": ("grad", "adam"), "fsdp": ("param", "grad", "adam")}

# %% [markdown]
# ## Where the ranks run
#
# Forked CPU ranks over gloo (one thread each), 2 and 4 of them; under torchrun on GPUs, NCCL with
# torchrun's world size. `--device cuda` without torchrun records them as not run (needs 2 GPUs).

# %%
ranks = _dist.place_ranks(run, [2, 4], "ZeRO stages on several GPUs (NCCL)")
if ranks is None:
    run.save()
    raise SystemExit(0)

# %% [markdown]
# ## ZeRO-1 and ZeRO-2 on one flat buffer
#
# All parameters are views into one flat tensor, padded to a multiple of p; rank r owns slice r.
# Adam runs only on the owned slice (a `Parameter` that shares the flat tensor's storage), then an
# all-gather puts every rank's updated slice back into everyone's flat tensor. The difference is
# the gradient: ZeRO-1 all-reduces the whole flat gradient and keeps it; ZeRO-2 reduce-scatters it
# (each rank receives the sum of its own slice only) and frees the full gradient, so between
# steps a rank holds 1/p of it. (This simple version still materialises the whole gradient during
# backward; DeepSpeed's stage 2 reduces bucket by bucket as backward produces them, to bound that
# transient too.)

# %%
class FlatZero:
    def __init__(self, model, rank, p, stage):
        self.model, self.rank, self.p, self.stage = model, rank, p, stage
        params = list(model.parameters())
        self.n = sum(q.numel() for q in params)
        self.padded = -(-self.n // p) * p
        dev = params[0].device
        self.flat = torch.zeros(self.padded, device=dev)
        offset = 0
        for q in params:
            self.flat[offset:offset + q.numel()].copy_(q.detach().flatten())
            q.data = self.flat[offset:offset + q.numel()].view_as(q)
            offset += q.numel()
        self.chunk = self.padded // p
        self.shard = torch.nn.Parameter(self.flat[rank * self.chunk:(rank + 1) * self.chunk])
        self.optimizer = torch.optim.Adam([self.shard], lr=LR)
        self.full_grad = None

    def step(self, x, y):
        self.model.zero_grad(set_to_none=True)
        F.mse_loss(self.model(x), y).backward()
        grad = torch.zeros(self.padded, device=self.flat.device)
        torch.cat([q.grad.flatten() for q in self.model.parameters()], out=grad[:self.n])
        self.model.zero_grad(set_to_none=True)  # the per-parameter gradients are now in `grad`
        if self.stage == 1:  # all-reduce, keep the full gradient (average over ranks)
            dist.all_reduce(grad)
            grad /= self.p
            self.full_grad = grad
            self.shard.grad = grad[self.rank * self.chunk:(self.rank + 1) * self.chunk]
        else:  # reduce-scatter: only my slice's sum arrives; the full gradient is freed
            mine = torch.empty(self.chunk, device=grad.device)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                dist.reduce_scatter_tensor(mine, grad)
            del grad
            self.shard.grad = mine / self.p
        self.optimizer.step()
        updated = self.shard.detach().clone()
        dist.all_gather(list(self.flat.split(self.chunk)), updated)

    def held(self):
        grads = [self.full_grad] if self.full_grad is not None else [self.shard.grad]
        return {"param": storage_bytes([self.flat]), "grad": storage_bytes(grads),
                "adam": storage_bytes(optimizer_state(self.optimizer))}


def adam_step(module, opt):
    """One MSE training step of ``module`` (DDP or FSDP-wrapped) with its Adam optimizer."""
    def step(x, y):
        opt.zero_grad(set_to_none=True)
        F.mse_loss(module(x), y).backward()
        opt.step()
    return step


def held_by(model, opt):
    """What this rank holds, counted from the tensors' storage: parameters, gradients, Adam state."""
    return lambda: {"param": storage_bytes(model.parameters()),
                    "grad": storage_bytes(q.grad for q in model.parameters()),
                    "adam": storage_bytes(optimizer_state(opt))}


def build(variant, rank, p):
    model = make_mlp(cfg["layers"], cfg["width"]).to(ranks.device)
    if variant == "ddp":
        ddp = DistributedDataParallel(model)
        opt = torch.optim.Adam(ddp.parameters(), lr=LR)
        return (adam_step(ddp, opt), held_by(model, opt),
                lambda: torch.cat([q.detach().flatten() for q in model.parameters()]))
    if variant in ("zero1", "zero2"):
        zero = FlatZero(model, rank, p, 1 if variant == "zero1" else 2)
        return zero.step, zero.held, lambda: zero.flat[:zero.n].clone()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    full = lambda: torch.cat([q.full_tensor().flatten() if isinstance(q, DTensor) else q.flatten()  # noqa: E731
                              for q in model.parameters()]).detach()
    return adam_step(model, opt), held_by(model, opt), full


def worker(rank, p):
    batches = [global_batch(s, cfg["batch"], cfg["width"]) for s in range(cfg["steps"])]
    mine = [(my_rows(x, rank, p).to(ranks.device), my_rows(y, rank, p).to(ranks.device)) for x, y in batches]
    out = {}
    for variant in VARIANTS:
        step, held, full = build(variant, rank, p)
        for x, y in mine:
            step(x, y)
        out[variant] = {"held": held(), "params": full().cpu()}
        x, y = mine[0]
        out[variant]["time"] = _dist.time_steps(lambda: step(x, y), ranks.device, cfg["repeats"])
    return out


n_params = sum(q.numel() for q in make_mlp(cfg["layers"], cfg["width"]).parameters())
run.metric("n_params", n_params, "parameters", origin="computed")
results = {p: _dist.launch(worker, p, device=ranks.device) for p in ranks.world_sizes}
if any(r is None for r in results.values()):  # another torchrun rank: rank 0 writes the record
    _dist.shutdown()
    raise SystemExit(0)

# %% [markdown]
# ## The same parameters as DDP
#
# After the same Adam steps, every variant's full parameters (FSDP's gathered with `full_tensor()`)
# must equal DDP's on every rank: sharding changes where the state lives, not the arithmetic.

# %%
for p, per_rank in results.items():
    for variant in VARIANTS[1:]:
        worst = 0.0
        ok = True
        for r in per_rank:
            good, err = close_to(r[variant]["params"], r["ddp"]["params"])
            ok, worst = ok and good, max(worst, err)
        run.check(f"p{p}.{variant}.equals_ddp", ok, f"{p} ranks, {cfg['steps']} Adam steps: largest |difference| from "
                  f"DDP's parameters {worst:.1e}")

# %% [markdown]
# ## Memory per rank: measured against the formula
#
# Bytes held on rank 0 at the optimizer step, per parameter of the model, split into parameters,
# gradients and Adam's state; the formula uses the padded shard (N rounded up to a multiple of p,
# per tensor for FSDP, which pads each parameter's first dimension) and adds Adam's 4-byte `step`
# counter per tensor it keeps.

# %%
def expected_bytes(variant, p, part):
    per_param = dict(zip(("param", "grad", "adam"), FORMULA[variant]))[part]
    shapes = [q.shape for q in make_mlp(cfg["layers"], cfg["width"]).parameters()]
    if variant == "fsdp" and part in SHARDED[variant]:
        numel = sum(-(-s[0] // p) * (q_numel // s[0]) for s, q_numel in ((s, torch.Size(s).numel()) for s in shapes))
    elif part in SHARDED[variant]:
        numel = -(-n_params // p)
    else:
        numel = -(-n_params // p) * p if variant in ("zero1", "zero2") else n_params
    steps = 0 if part != "adam" else 4 * (len(shapes) if variant in ("ddp", "fsdp") else 1)
    return per_param * numel + steps


rows = []
for p, per_rank in results.items():
    for variant in VARIANTS:
        held = per_rank[0][variant]["held"]
        total = sum(held.values())
        expected = sum(expected_bytes(variant, p, part) for part in held)
        run.check(f"p{p}.{variant}.memory_formula", all(held[k] == expected_bytes(variant, p, k) for k in held),
                  f"measured {held}, formula {[expected_bytes(variant, p, k) for k in held]} bytes")
        run.metric(f"{variant}.p{p}.bytes_per_param", total / n_params, "bytes",
                   label=f"{variant}, {p} ranks: parameters + gradients + Adam held per rank, per model parameter")
        for part in held:
            run.metric(f"{variant}.p{p}.{part}_bytes_per_param", held[part] / n_params, "bytes")
        t = per_rank[0][variant]["time"]
        run.metric(f"{variant}.p{p}.step_ms", t.median_s * 1e3, "ms", label=f"{variant}, {p} ranks: one step (median)")
        rows.append([variant, p, round(held["param"] / n_params, 3), round(held["grad"] / n_params, 3),
                     round(held["adam"] / n_params, 3), round(total / n_params, 3), round(expected / n_params, 3),
                     round(t.median_s * 1e3, 2)])
paper = {"ddp": lambda p: 16, "zero1": lambda p: 4 + 12 / p, "zero2": lambda p: 2 + 14 / p, "fsdp": lambda p: 16 / p}
for variant in VARIANTS:
    for p in results:
        run.metric(f"paper.{variant}.p{p}", paper[variant](p), "bytes",
                   label="ZeRO paper, mixed-precision Adam (2 + 2 + 12 bytes), per parameter and rank", origin="computed")
run.table("memory", f"Bytes per parameter held per rank at the optimizer step, fp32 Adam, {n_params:,} parameters",
          ["variant", "ranks", "params", "grads", "Adam", "total", "formula (padded)", "step ms"], rows)
p_max = max(results)  # the most ranks run
bytes_at = {v: run.metrics[f"{v}.p{p_max}.bytes_per_param"]["value"] for v in VARIANTS}
run.series("memory", f"{p_max} ranks: DDP {bytes_at['ddp']:.2g}, ZeRO-1 {bytes_at['zero1']:.2g}, "
           f"ZeRO-2 {bytes_at['zero2']:.2g}, FSDP {bytes_at['fsdp']:.2g} bytes per parameter",
           "ranks p", "bytes per parameter",
           {v: (list(results), [run.metrics[f"{v}.p{p}.bytes_per_param"]["value"] for p in results])
            for v in VARIANTS})
run.save()
_dist.shutdown()
