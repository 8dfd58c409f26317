"""Run a distributed grader's checks on 2 and 4 CPU ranks (gloo), in processes started with spawn.

One spawn of 4 processes serves every (exercise, solution) job it is given and both world sizes: for
each job, ranks 0-1 form a world of 2 (ranks 2-3 wait), then ranks 0-3 a world of 4. The rendezvous is
one TCP store that this process hosts on a free port (chosen by the OS) before the ranks start, each
(job, world) under its own key prefix. Each rank writes its check rows to a file as it goes; a check
passes when it passes on every rank.
Processes that outlive the deadline are terminated, then killed.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path

WORLDS = (2, 4)
COLLECTIVE_TIMEOUT_S = 45  # a send without its receive (a deadlock) fails after this, not never


def _worker(rank: int, jobs: list, worlds: tuple, port: int, outdir: str) -> None:
    import torch
    import torch.distributed as dist

    from exercises import grader
    from exercises._grading import describe

    torch.set_num_threads(1)  # several ranks share the cores
    warnings.simplefilter("ignore")  # deprecation notices from an attempt's imports are noise in a grade
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    for j, (exercise, path, job_worlds) in enumerate(jobs):
        for w in job_worlds or worlds:
            if rank >= w:
                continue
            out = Path(outdir, f"{j}-{w}-{rank}.jsonl")
            out.touch()

            def emit(name: str, passed: bool, why: str) -> None:
                with out.open("a") as f:  # one line per check, at once: a rank that aborts keeps its earlier rows
                    f.write(json.dumps([name, bool(passed), why]) + "\n")
            try:
                dist.init_process_group("gloo", store=dist.PrefixStore(f"job{j}-world{w}/", store), rank=rank,
                                        world_size=w, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
            except Exception as e:
                emit("start the process group", False, describe(e))
            else:
                try:
                    grader(exercise).rank_checks(path, rank, w, emit)
                except Exception as e:
                    emit("load and run the solution", False, describe(e))
                finally:
                    with contextlib.suppress(Exception):
                        dist.destroy_process_group()
            emit("__done__", True, "")


def run_jobs(jobs: list[tuple], worlds: tuple = WORLDS, deadline_s: float = 240.0) -> list[dict]:
    """For each job (exercise, solution path[, world sizes]), {world: [(check, passed, why)]} merged over
    ranks (a missing rank is a FAIL). A job without its own world sizes runs on each of ``worlds``."""
    jobs = [(job[0], str(job[1]), tuple(job[2]) if len(job) > 2 else None) for job in jobs]
    import torch.distributed as dist
    import torch.multiprocessing as mp

    # the store is up before any rank starts, so no rank waits on a connection retry
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    with tempfile.TemporaryDirectory(prefix="exercise-ranks-") as outdir:
        nprocs = max(max(job[2] or worlds) for job in jobs)
        ctx = mp.start_processes(_worker, args=(jobs, worlds, store.port, outdir), nprocs=nprocs,
                                 join=False, start_method="spawn")
        crash = ""
        end = time.monotonic() + deadline_s
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > end:
                    crash = f"the ranks did not finish within {deadline_s:.0f} s (a deadlock?)"
                    break
        except Exception as e:  # a rank died (mp raises ProcessRaisedException / ProcessExitedException)
            crash = f"a rank crashed: {str(e).strip().splitlines()[-1][:200]}"
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
                    p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join(5)
        results = []
        for j in range(len(jobs)):
            per_world = {}
            for w in jobs[j][2] or worlds:
                merged: dict[str, list] = {}
                missing = []
                for r in range(w):
                    f = Path(outdir, f"{j}-{w}-{r}.jsonl")
                    lines = [json.loads(x) for x in f.read_text().splitlines()] if f.exists() else []
                    if not lines or lines[-1][0] != "__done__":
                        missing.append(r)
                    for name, passed, why in lines:
                        if name == "__done__":
                            continue
                        row = merged.setdefault(name, [True, why])
                        if not passed and row[0]:
                            row[0], row[1] = False, f"rank {r}: {why}"
                rows = [(name, ok, why) for name, (ok, why) in merged.items()]
                if missing:
                    rows.append(("every rank finished", False,
                                 f"ranks {missing} stopped before the end: {crash or 'they stopped early'}"))
                per_world[w] = rows
            results.append(per_world)
        return results


def report(g, per_world: dict) -> None:
    for w, rows in per_world.items():
        for name, ok, why in rows:
            g.check(f"{w} ranks: {name}", ok, why)


@contextlib.contextmanager
def only_point_to_point():
    """Inside: every collective of torch.distributed raises, and sends are counted (elements per rank)."""
    import torch.distributed as dist

    banned = ["all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
              "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "all_reduce_coalesced"]
    saved = {name: getattr(dist, name) for name in banned + ["send", "isend"] if hasattr(dist, name)}
    counter = {"elements": 0, "collectives": []}

    def ban(name):
        def refused(*args, **kwargs):
            counter["collectives"].append(name)
            raise RuntimeError(f"dist.{name} was called: this exercise allows only send/recv (isend/irecv)")
        return refused

    def counted(fn):
        def send(tensor, *args, **kwargs):
            counter["elements"] += tensor.numel()
            return fn(tensor, *args, **kwargs)
        return send

    for name in banned:
        if name in saved:
            setattr(dist, name, ban(name))
    dist.send, dist.isend = counted(saved["send"]), counted(saved["isend"])
    try:
        yield counter
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)
