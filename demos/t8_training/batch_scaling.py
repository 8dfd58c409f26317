# %% [markdown]
# # The optimizer at scale: learning rate vs global batch, and gradient clipping under sharding
#
# **Learning rate.** Adding data-parallel ranks multiplies the global batch. With SGD, Goyal et al.
# ([Accurate, Large Minibatch SGD](https://arxiv.org/abs/1706.02677)) scale the learning rate
# linearly with the batch and warm it up. Here the same small GPT is trained with SGD + momentum at
# global batches of 1x, 2x and 4x a base batch, on 1, 2 and 4 real data-parallel ranks (gloo, DDP),
# for the same number of *tokens*, with the base learning rate kept, and with it scaled linearly
# plus a linear warm-up. The 2- and 4-rank runs without adjustment are checked, step for step,
# against one process on a 2x and 4x bigger batch.
#
# **Clipping.** `clip_grad_norm_` scales every gradient by max_norm / ||g|| where ||g|| is the norm
# of the *whole* gradient. Under FSDP each rank holds a shard of every gradient; the global norm needs
# the squared norms of all shards summed across ranks. PyTorch's `clip_grad_norm_` does that for
# FSDP2's DTensor gradients; a hand-written clip on the local shards computes a per-shard norm and
# scales each shard by a different factor: silently wrong. Checked on 2 gloo ranks against
# single-process clipping.

# %%
import torch
import torch.distributed as dist

try:  # the public path since torch 2.6
    from torch.distributed.fsdp import fully_shard
except ImportError:  # older releases kept FSDP2 here
    from torch.distributed._composable.fsdp import fully_shard

from torch.nn.parallel import DistributedDataParallel

from demos.harness.run import start
from demos.t7_parallelism._dist import launch, under_torchrun
from demos.t8_training._gpt import GPTConfig, batch, make_gpt

run = start("batch_scaling", title="Learning rate vs global batch, and gradient clipping under FSDP",
            sizes={"tiny": {"cfg": GPTConfig(vocab=128, seq=16, width=32, heads=2, layers=2, dropout=0.0), "b": 4,
                            "tokens_steps": 16},
                   "small": {"cfg": GPTConfig(vocab=256, seq=32, width=64, heads=2, layers=2, dropout=0.0), "b": 4,
                             "tokens_steps": 64},
                   # The question (learning rate vs batch at a fixed token budget) needs a model that learns the
                   # task in a few hundred steps, not one that fills a GPU: 11 trainings (6 for the lr sweep, 5
                   # compared) of 200 base-batch steps' tokens each, on a 13 M-parameter GPT (ms a step in fp32).
                   "full": {"cfg": GPTConfig(vocab=512, seq=128, width=512, heads=8, layers=4, dropout=0.0),
                            "b": 16, "tokens_steps": 200}},
            cpu_threads=1)
cfg, B, BASE_STEPS = run.sizes["cfg"], run.sizes["b"], run.sizes["tokens_steps"]
dev = run.torch_device
MAX_NORM = 0.5
import torch._dynamo  # noqa: E402,F401  DDP imports it on first use: import it once, before the ranks fork

# %% [markdown]
# ## Learning rate as the global batch grows, on real data-parallel ranks
#
# `train(k, ...)` is one process on k x the base batch. `dp_worker` is the same training on k real
# ranks (forked processes over gloo, DDP averaging the gradients), each on its own base-sized slice
# of the same global batch. Without any adjustment the k-rank run must reproduce the one-process run
# on the k-times-bigger batch, step for step: that equivalence is why adding ranks *is* growing the
# batch, and why the learning rate then needs the same care. Each rank's loss is averaged across the
# ranks (an all-reduce) to give the global batch's loss.

# %%
def lr_at(step, steps, lr, scaled):
    warmup = max(1, steps // 5) if scaled else 0
    return lr * min(1.0, (step + 1) / warmup) if warmup else lr


def train(k, scaled, base_lr):
    """One process, k x the base batch for BASE_STEPS / k steps (the same tokens); losses, held-out loss."""
    model = make_gpt(cfg, seed=0, device=dev).train()
    lr, steps = base_lr * k if scaled else base_lr, BASE_STEPS // k
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, scaled)
        tokens, targets = batch(cfg, B * k, step=step, device=dev)
        loss = model(tokens, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        held_out = model(*batch(cfg, 4 * B, step=10**6, device=dev)).item()
    return losses, held_out


def dp_worker(rank, world, scaled, base_lr):
    """The same training on `world` real ranks: DDP, base batch B per rank, global batch B * world."""
    model = DistributedDataParallel(make_gpt(cfg, seed=0).train())
    lr, steps = base_lr * world if scaled else base_lr, BASE_STEPS // world
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    mine, losses = slice(rank * B, (rank + 1) * B), []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, scaled)
        tokens, targets = batch(cfg, B * world, step=step)
        loss = model(tokens[mine], targets[mine])
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces (averages) the gradients
        opt.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        losses.append(global_loss.item() / world)
    with torch.no_grad():
        held_out = model.module(*batch(cfg, 4 * B, step=10**6)).item()
    return losses, held_out


# The base learning rate is tuned first: the best held-out loss at the base batch over a small sweep.
sweep = {lr: train(1, False, lr)[1] for lr in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)}
LR = min(sweep, key=sweep.get)
run.metric("base_lr", LR, "lr", label="best of the sweep at the base batch")
edge = " (sweep edge)" if LR in (min(sweep), max(sweep)) else ""
finite = [v for v in sweep.values() if abs(v) < float("inf")]  # a diverged run's loss can be inf or nan
worst = f"worst {max(finite):.2f}" if len(finite) == len(sweep) else "some lr diverged"
run.series("lr_sweep", f"Base batch: lr {LR:g} best{edge}, held-out loss {sweep[LR]:.2f} ({worst})",
           "learning rate", "held-out loss",
           {"base batch": (list(sweep), list(sweep.values()))}, x_log=True)
real_ranks = dev.type == "cpu" and not under_torchrun()
if not real_ranks:
    run.not_run("lr scaling on 2 and 4 data-parallel ranks", "needs 2 and 4 GPUs (torchrun); the CPU record forks "
                "gloo ranks. Here the 2x and 4x runs are one process on the bigger batch")
lines, rows = {}, []
for k in (1, 2, 4):
    for scaled in (False, True):
        if k == 1 and scaled:
            continue
        one_process = train(k, scaled, LR) if not scaled or not real_ranks else None
        if k == 1:
            base_run = one_process
        if real_ranks and k > 1:
            losses, held_out = launch(dp_worker, k, scaled, LR)[0]
            if not scaled:  # the equivalence: k ranks x B = one process x (k B), step for step
                run.check_close(f"k{k}.ranks_equal_big_batch", torch.tensor(losses), torch.tensor(one_process[0]),
                                rtol=1e-4, atol=1e-5, reference_name=f"one process on a {k * B}-sequence batch")
                base_steps = base_run[0][:len(losses)]  # the wrong reference: one process at the base batch
                run.check_wrong(f"k{k}.ranks_differ_from_base_batch",
                                max(abs(a - b) for a, b in zip(losses, base_steps)) > 1e-3,
                                f"{k} ranks do not match one process on the {B}-sequence base batch (largest loss "
                                f"difference {max(abs(a - b) for a, b in zip(losses, base_steps)):.2e})")
                run.metric(f"k{k}.ranks_vs_big_batch_max_loss_diff",
                           max(abs(a - b) for a, b in zip(losses, one_process[0])), "nats",
                           label=f"{k} ranks x {B} sequences vs one process x {k * B}: largest loss difference "
                                 "over the run")
        else:
            losses, held_out = one_process
        name = f"k{k}.{'scaled_warmup' if scaled else 'base_lr'}"
        where = f"{k} rank{'s' if k > 1 else ''}" if real_ranks else f"{k}x batch"
        lines[f"{where}, {'lr x' + str(k) + ' + warm-up' if scaled else 'base lr'}"] = (
            [(i + 1) * k * B * cfg.seq for i in range(len(losses))], losses)
        run.metric(f"{name}.held_out_loss", held_out, "nats", label="after the same number of tokens")
        run.metric(f"{name}.final_loss", sum(losses[-3:]) / len(losses[-3:]), "nats",
                   label="training loss, mean of the last 3 steps")
        rows.append([k if real_ranks else 1, k * B, f"x{k} + warm-up" if scaled else "base", len(losses),
                     round(held_out, 4)])
run.series("lr_scaling", "Loss vs tokens seen, SGD + momentum" + (", 1, 2, 4 gloo ranks" if real_ranks else ""),
           "tokens seen", "loss (nats)", lines)
run.table("lr_scaling", "Same tokens, bigger global batch: held-out loss", ["ranks", "global batch", "learning rate",
          "steps", "held-out loss"], rows)
for k in (2, 4):
    run.metric(f"k{k}.scaling_gain", run.metrics[f"k{k}.base_lr.held_out_loss"]["value"]
               - run.metrics[f"k{k}.scaled_warmup.held_out_loss"]["value"], "nats",
               label="held-out loss with the base lr minus with the scaled lr + warm-up")

# %% [markdown]
# ## Clipping under FSDP: global norm vs per-shard norm

# %%
def clip_worker(rank, world):
    torch.manual_seed(0)
    reference = make_gpt(cfg, seed=0)
    sharded = make_gpt(cfg, seed=0)
    for layer in sharded.layers:
        fully_shard(layer)
    fully_shard(sharded)
    tokens, targets = batch(cfg, B * world, step=0)
    reference(tokens, targets).backward()  # every rank: the whole batch, one process's answer
    norm_ref = torch.nn.utils.clip_grad_norm_(reference.parameters(), MAX_NORM)
    mine = slice(rank * B, (rank + 1) * B)
    sharded(tokens[mine], targets[mine]).backward()  # FSDP averages the ranks' gradients
    grads = [p.grad for p in sharded.parameters()]
    local_copy = [g.to_local().clone() for g in grads]
    norm_fsdp = torch.nn.utils.clip_grad_norm_(sharded.parameters(), MAX_NORM)
    fsdp_full = {n: p.grad.full_tensor() for n, p in sharded.named_parameters()}
    # the hand-written clip: this rank's shards only
    local_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in local_copy]))
    factor = min(1.0, MAX_NORM / (float(local_norm) + 1e-6))
    per_shard = [g * factor for g in local_copy]
    per_shard_full = {}
    for (n, p), g in zip(sharded.named_parameters(), per_shard):
        parts = [torch.empty_like(g) for _ in range(world)]
        dist.all_gather(parts, g.contiguous())
        per_shard_full[n] = torch.cat(parts)[: p.shape[0]]
    err = lambda full: max(float((full[n] - p.grad).abs().max()) for n, p in reference.named_parameters())
    return {"norm_ref": float(norm_ref), "norm_fsdp": float(norm_fsdp.full_tensor() if hasattr(norm_fsdp, "full_tensor")
            else norm_fsdp), "local_norm": float(local_norm), "err_fsdp": err(fsdp_full), "err_per_shard": err(per_shard_full)}


if under_torchrun():
    run.not_run("clipping under FSDP", "this part forks its own 2 gloo ranks")
elif dev.type != "cpu":
    run.not_run("clipping under FSDP", "this part forks 2 gloo ranks on the host CPU; run it with --device cpu")
else:
    results = launch(clip_worker, 2)
    r0 = results[0]
    run.metric("clip.global_norm", r0["norm_ref"], "norm", label="single process, whole batch")
    run.metric("clip.fsdp_norm", r0["norm_fsdp"], "norm", label="clip_grad_norm_ on FSDP2 (DTensor) gradients")
    for rank, r in enumerate(results):
        run.metric(f"clip.rank{rank}.shard_norm", r["local_norm"], "norm", label="this rank's shards only")
        run.metric(f"clip.rank{rank}.fsdp_max_err", r["err_fsdp"], "abs")
        run.metric(f"clip.rank{rank}.per_shard_max_err", r["err_per_shard"], "abs")
    run.check("fsdp_clip_equals_global", all(r["err_fsdp"] < 1e-6 for r in results)
              and abs(r0["norm_fsdp"] - r0["norm_ref"]) < 1e-4 * r0["norm_ref"],
              f"FSDP's clip: norm {r0['norm_fsdp']:.6f} vs {r0['norm_ref']:.6f}, clipped gradients within "
              f"{max(r['err_fsdp'] for r in results):.1e}")
    run.check("per_shard_clip_is_wrong", r0["norm_ref"] > MAX_NORM and all(r["err_per_shard"] > 1e-4 for r in results),
              f"per-shard norms {[round(r['local_norm'], 4) for r in results]} vs global {r0['norm_ref']:.4f}: "
              f"clipped gradients off by up to {max(r['err_per_shard'] for r in results):.1e}")
run.save()
