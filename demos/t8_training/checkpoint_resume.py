# %% [markdown]
# # Checkpoint, kill a rank, resume: the same losses, bit for bit
#
# A long job will lose a rank (a GPU, a node, a link). What makes recovery correct is restoring
# *everything* a step depends on: the weights, the optimizer's state (AdamW's moments and step
# counts), the position in the data, and every random number generator (dropout here). Leave one
# out and the resumed run drifts from the run that never stopped, and nobody notices.
#
# The demo trains a small GPT with DDP on 2 gloo ranks, dropout on. Every few steps it writes a
# distributed checkpoint with `torch.distributed.checkpoint` (DCP: each rank writes its part in
# parallel, plus one metadata file; replicated tensors are written once). Then:
#
# 1. an uninterrupted run of N steps records its losses;
# 2. a second run of the same job is killed mid-run: one rank process sends itself SIGKILL (no
#    clean-up, no last checkpoint); the launcher sees it die and stops the other rank;
# 3. the job is started again, loads the last checkpoint and runs to step N.
#
# The resumed losses must equal the uninterrupted run's exactly (`==` on float32), and the time to
# save and to restore a checkpoint is measured. Those feed the checkpoint-interval formula on the
# page (Young, Daly).

# %%
import math
import os
import shutil
import signal
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

from demos.harness.run import start
from demos.t7_parallelism._dist import launch, under_torchrun
from demos.t8_training._gpt import GPTConfig, batch, make_gpt

run = start("checkpoint_resume", title="Distributed checkpoint, a killed rank, and a bit-identical resume",
            sizes={"tiny": {"cfg": GPTConfig(vocab=128, seq=16, width=32, heads=2, layers=2), "b": 2,
                            "steps": 8, "every": 3, "kill_at": 7},
                   "small": {"cfg": GPTConfig(vocab=512, seq=64, width=128, heads=4, layers=4), "b": 4,
                             "steps": 12, "every": 4, "kill_at": 10},
                   "full": {"cfg": GPTConfig(vocab=32000, seq=1024, width=1024, heads=16, layers=8), "b": 4,
                            "steps": 30, "every": 10, "kill_at": 25}},
            cpu_threads=1)
cfg, B, STEPS, EVERY, KILL_AT = (run.sizes[k] for k in ("cfg", "b", "steps", "every", "kill_at"))
if run.torch_device.type != "cpu":  # forked ranks are gloo processes on the host CPU: keep them small there
    cfg, B = GPTConfig(vocab=512, seq=64, width=128, heads=4, layers=4), 4
    run.not_run("job on GPU ranks", "the killed-and-resumed job runs on forked gloo ranks on the host CPU (small "
                "configuration); its correctness does not depend on the device, its times are the host's")

# %% [markdown]
# ## The job
#
# The state a step depends on, as one dictionary for DCP: model and optimizer (through
# `get_state_dict`, which gives DCP-ready keys), the step counter (the data position: batch k of rank
# r is a pure function of (r, k) here; a real data loader checkpoints its own state, e.g. torchdata's
# `StatefulDataLoader`), and each rank's RNG state under its own key, since the ranks' dropout
# streams differ.

# %%
def job(rank, world, folder, kill_at, resume, restore_rng=True):
    torch.manual_seed(1000 + rank)  # each rank's dropout stream
    model = make_gpt(cfg, seed=0).train()
    ddp = DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    folder = Path(folder)
    first, timings = 0, {}

    def state(rng=None):
        model_sd, optim_sd = get_state_dict(ddp, opt)
        return {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0),
                f"rng_rank{rank}": torch.get_rng_state() if rng is None else rng}

    if resume is not None:  # the step of the checkpoint to load (what LATEST said when the job restarted)
        last = resume
        sd = state()
        _, load_s = run.first_call(lambda: dcp.load(sd, checkpoint_id=folder / f"step{last}"))
        set_state_dict(ddp, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        if restore_rng:
            torch.set_rng_state(sd[f"rng_rank{rank}"])
        first, timings["load_s"] = int(sd["step"]), load_s
    losses = {}
    for step in range(first, STEPS):
        if step == kill_at and rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # a real crash: no clean-up, no last checkpoint
        tokens, targets = batch(cfg, B, step=step, seed=rank)
        loss = ddp(tokens, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses[step] = loss.item()
        if (step + 1) % EVERY == 0:
            sd = state()
            sd["step"] = torch.tensor(step + 1)
            _, save_s = run.first_call(lambda sd=sd, step=step: dcp.save(sd, checkpoint_id=folder / f"step{step + 1}"))
            timings.setdefault("save_s", []).append(save_s)
            dist.barrier()
            if rank == 0:
                (folder / "LATEST").write_text(str(step + 1))
    return {"losses": losses, **timings}


# %% [markdown]
# ## Run, kill, resume

# %%
if under_torchrun():
    run.not_run("kill and resume", "the demo kills and restarts ranks it forked itself; under torchrun use "
                "--max-restarts for the restart (the job code is the same)")
    run.save()
    raise SystemExit

root = Path(tempfile.mkdtemp(prefix="t8-ckpt-"))
try:
    straight_dir, crash_dir = root / "straight", root / "crash"
    straight_dir.mkdir()
    crash_dir.mkdir()
    straight = launch(job, 2, str(straight_dir), -1, None)
    try:
        launch(job, 2, str(crash_dir), KILL_AT, None)
        killed = False
    except mp.ProcessExitedException as e:  # torch.multiprocessing reports the dead rank, stops the other
        killed = "SIGKILL" in str(e) or "signal" in str(e).lower()
        run.log(f"  the job died as planned: {str(e).splitlines()[0]}")
    run.check("rank_was_killed", killed, f"rank 1 died of SIGKILL at step {KILL_AT}; the launcher stopped the job")
    last = int((crash_dir / "LATEST").read_text())
    resumed = launch(job, 2, str(crash_dir), -1, last)
    lost = KILL_AT - last
    run.metric("resume.from_step", last, "steps")
    run.metric("resume.steps_recomputed", lost, "steps", label="done before the crash, after the last checkpoint")
    for rank in range(2):
        want = {k: v for k, v in straight[rank]["losses"].items() if k >= last}
        got = resumed[rank]["losses"]
        same = want == got and len(got) == STEPS - last
        worst = max(abs(want[k] - got.get(k, math.inf)) for k in want)
        run.check(f"rank{rank}.resumed_losses_identical", same,
                  f"steps {last}..{STEPS - 1}: {len(got)} losses, max |difference| {worst:.1e} (must be exactly 0)")

    # The teeth: the same resume without restoring the RNG state (dropout then draws other masks).
    careless = launch(job, 2, str(crash_dir), -1, last, False)
    drift = max(abs(straight[0]["losses"][k] - v) for k, v in careless[0]["losses"].items())
    run.check("resume_without_rng_differs", drift > 0, f"without the RNG state the resumed losses differ by up to {drift:.1e}")
    run.metric("resume.without_rng_max_loss_diff", drift, "nats")
    ckpt_bytes = sum(f.stat().st_size for f in (crash_dir / f"step{last}").rglob("*") if f.is_file())
    save_s = max(max(r["save_s"]) for r in straight)
    load_s = max(r["load_s"] for r in resumed)
    run.metric("checkpoint.mb", ckpt_bytes / 2**20, "MiB", label="one checkpoint on disk: weights, AdamW states, RNG")
    run.metric("checkpoint.save_s", save_s, "s", label="dcp.save, slowest rank, slowest checkpoint")
    run.metric("checkpoint.load_s", load_s, "s", label="dcp.load, slowest rank")
    run.metric("checkpoint.save_mb_per_s", ckpt_bytes / 1e6 / save_s, "MB/s")
finally:
    shutil.rmtree(root, ignore_errors=True)

# %% [markdown]
# ## How often to checkpoint: Young and Daly
#
# With checkpoint cost delta and mean time between failures M of the *whole job*, the interval that
# minimises lost time is about tau = sqrt(2 delta M) (Young, [A first order approximation to the
# optimum checkpoint interval](https://doi.org/10.1145/361147.361115), 1974); Daly's refinement
# ([A higher order estimate of the optimum checkpoint interval for restart dumps](https://doi.org/10.1016/j.future.2004.11.016),
# 2006) adds higher-order terms, tau = sqrt(2 delta M) (1 + sqrt(delta/2M)/3 + delta/18M) - delta for
# delta < 2M, and tau = M beyond. The expected waste is then about delta / tau (writing) +
# (tau + delta) / (2 M) (recomputing half an interval on average), plus the restart itself.
# M shrinks with the job: Meta's Llama 3 report ([The Llama 3 Herd of Models](https://arxiv.org/abs/2407.21783),
# section 3.3.4) counts 419 unexpected interruptions in 54 days on 16,384 H100s, about one every 3.1 hours.
# Below, delta is a 70B model's full training state (16 B per parameter, the step_memory demo) written
# at 64 times the per-rank rate measured above (64 writers), for every job size: an ASSUMPTION that the
# storage's bandwidth is fixed while the job grows, so the checkpoint cost stays and M shrinks.

# %%
def young_daly(delta_s, mtbf_s):
    """Daly's higher-order interval (tau = M once delta >= 2M) and the first-order expected waste."""
    if delta_s >= 2 * mtbf_s:
        tau = mtbf_s
    else:
        r = delta_s / (2 * mtbf_s)
        tau = math.sqrt(2 * delta_s * mtbf_s) * (1 + math.sqrt(r) / 3 + r / 9) - delta_s
    return tau, delta_s / tau + (tau + delta_s) / (2 * mtbf_s)


MTBF_16K_S = 54 * 24 * 3600 / 419  # Llama 3 report: 419 interruptions in 54 days on 16,384 GPUs
per_gpu_mtbf = MTBF_16K_S * 16384
rate = ckpt_bytes / 2 / save_s  # bytes per second per rank, measured
rows = []
for gpus in (64, 1024, 16384):
    mtbf = per_gpu_mtbf / gpus
    delta = 16 * 68.98e9 / (64 * rate)
    tau, waste = young_daly(delta, mtbf)
    rows.append([gpus, mtbf / 3600, delta, tau / 60, waste])
    run.metric(f"young_daly.g{gpus}.interval_min", tau / 60, "min", label=f"{gpus} GPUs, 70B state, measured write rate", origin="computed")
    run.metric(f"young_daly.g{gpus}.waste", waste, "fraction", origin="computed")
    run.metric(f"young_daly.g{gpus}.mtbf_h", mtbf / 3600, "h", label="job MTBF, scaled from the Llama 3 report", origin="computed")
run.metric("young_daly.checkpoint_cost_s", 16 * 68.98e9 / (64 * rate), "s",
           label="70B training state at 64x the per-rank write rate measured here", origin="computed")
run.table("young_daly", "Checkpoint interval for a 70B job (state 16 B/param; write rate per rank measured here)",
          ["GPUs", "job MTBF (h)", "checkpoint cost (s)", "best interval (min)", "expected waste"], rows)
run.save()
