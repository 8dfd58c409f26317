"""Run a distributed grader's checks on 2 and 4 CPU ranks (gloo), in processes started with spawn.

One spawn of 4 processes serves every (exercise, solution) job it is given and both world sizes: for
each job, ranks 0-1 form a world of 2 (ranks 2-3 wait), then ranks 0-3 a world of 4. The rendezvous is
one TCP store that this process hosts on a free port (chosen by the OS) before the ranks start, each
(job, world) under its own key prefix.
The ranks only compute: each runs the grader's ``rank_outputs`` on inputs drawn from the seed it is given,
and writes what the solution returned to a file as it goes (tensors, read back with
``torch.load(weights_only=True)``). This process, which never imports the solution, judges them with the
grader's ``judge`` (its own references, from the same seeds); a check passes when it passes on every rank.
In a rank, nothing under exercises/ can be imported or opened once the solution may run (``_isolate.seal``).
Processes that outlive the deadline are terminated, then killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path

from exercises._grading import SolutionRaised, SolutionStopped, describe, value
from exercises._isolate import one_line, well_formed

WORLDS = (2, 4)
COLLECTIVE_TIMEOUT_S = 45  # a send without its receive (a deadlock) fails after this, not never
START = "start the process group"  # the one row of a rank whose process group did not start
LOAD = "load and run the solution"  # the one row of a solution that cannot be imported
FINISHED = "every rank finished"  # the row of ranks that stopped before the end (it names why)
DONE = "__done__"


def _worker(rank: int, jobs: list, worlds: tuple, port: int, outdir: str, seed: int) -> None:
    import torch
    import torch.distributed as dist

    from exercises import grader
    from exercises._isolate import portable, seal, stopped_by
    from records import atomic

    torch.set_num_threads(1)  # several ranks share the cores
    warnings.simplefilter("ignore")  # deprecation notices from an attempt's imports are noise in a grade
    rank_outputs = {exercise: grader(exercise).rank_outputs for exercise, _, _ in jobs}
    seal([path for _, path, _ in jobs])  # from here on, the solution may run: nothing under exercises/ is read
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    for j, (exercise, path, job_worlds) in enumerate(jobs):
        for w in job_worlds or worlds:
            if rank >= w:
                continue
            out = Path(outdir, f"{j}-{w}-{rank}.pt")
            rows: list = []

            def emit(name: str, result: dict) -> None:
                rows.append((name, result))  # the whole list, rewritten at once: a rank that aborts keeps its rows
                atomic.write_bytes_via(out, lambda tmp: torch.save(rows, tmp))

            def run(name: str, fn) -> None:
                """One check's outputs: fn() on this rank, or what it raised; then the ranks line up again."""
                try:
                    emit(name, {"value": portable(fn())})
                except Exception as e:  # the attempt's bug is the grade, never a crash
                    emit(name, {"raised": describe(e)})
                with contextlib.suppress(Exception):
                    dist.barrier()

            try:
                dist.init_process_group("gloo", store=dist.PrefixStore(f"job{j}-world{w}/", store), rank=rank,
                                        world_size=w, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
            except Exception as e:
                emit(START, {"raised": describe(e)})
            else:
                try:
                    rank_outputs[exercise](path, rank, w, seed, run)
                except Exception as e:
                    emit(LOAD, {"raised": describe(e)})
                except BaseException as e:  # sys.exit(), exit() from the solution: one line, no traceback
                    Path(outdir, f"{j}-{w}-{rank}.stopped").write_text(stopped_by(e), encoding="utf-8")
                    os._exit(3)
                finally:
                    with contextlib.suppress(Exception):
                        dist.destroy_process_group()
            emit(DONE, {"value": None})
    Path(outdir, f"{rank}.finished").touch()  # every job served: an exit before this is the solution's doing


def run_jobs(jobs: list[tuple], worlds: tuple = WORLDS, deadline_s: float = 240.0, seed: int = 0) -> list[dict]:
    """For each job (exercise, solution path[, world sizes]), {world: [(check, passed, why)]} merged over
    ranks (a missing rank is a FAIL). A job without its own world sizes runs on each of ``worlds``; the ranks
    draw their inputs from ``seed``."""
    jobs = [(job[0], str(Path(job[1]).resolve()), tuple(job[2]) if len(job) > 2 else None) for job in jobs]
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from exercises import grader

    # the store is up before any rank starts, so no rank waits on a connection retry
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    with tempfile.TemporaryDirectory(prefix="exercise-ranks-") as outdir:
        nprocs = max(max(job[2] or worlds) for job in jobs)
        # the ranks' C++ warnings (a store that waits on a rank the solution ended) are noise in a grade: the
        # FINISHED row says what happened in one line
        # and a BLAS pool started before the seal would run unsealed (_sandbox.py): none (spawn starts each rank
        # with this process's environment)
        rank_env = {"TORCH_CPP_LOG_LEVEL": "ERROR", "OPENBLAS_NUM_THREADS": "1"}
        saved = {name: os.environ.get(name) for name in rank_env}
        os.environ.update(rank_env)
        try:
            ctx = mp.start_processes(_worker, args=(jobs, worlds, store.port, outdir, seed), nprocs=nprocs,
                                     join=False, start_method="spawn")
        finally:
            for name, value in saved.items():
                os.environ.pop(name) if value is None else os.environ.update({name: value})
        crash = ""
        end = time.monotonic() + deadline_s
        # when a rank fails, join() terminates the others and logs each one: the FINISHED row says it in one line
        spawn_log = logging.getLogger("torch.multiprocessing.spawn")
        spawn_level = spawn_log.level
        spawn_log.setLevel(logging.ERROR)
        try:
            while not ctx.join(timeout=1.0):
                if any(p.exitcode == 0 and not Path(outdir, f"{r}.finished").exists()
                       for r, p in enumerate(ctx.processes)):
                    break  # a rank the solution ended (os._exit(0)): the others would wait for it until the timeout
                if time.monotonic() > end:
                    crash = (f"your solution ran longer than {deadline_s:g} s (the time limit); look for an infinite "
                             "loop, or a send without its receive (a deadlock)")
                    break
        except Exception as e:  # a rank died (mp raises ProcessRaisedException / ProcessExitedException)
            notes = sorted(Path(outdir).glob("*.stopped"))
            crash = (one_line(notes[0].read_text(encoding="utf-8", errors="replace")) if notes else
                     f"a rank crashed: {one_line(str(e).strip().splitlines()[-1])[:200]}")
        finally:
            spawn_log.setLevel(spawn_level)
            codes = sorted({p.exitcode for p in ctx.processes if p.exitcode})  # before any rank is stopped here
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
                    p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join(5)
        if not crash:
            crash = (f"they ended (exit codes {codes or [0]}) before returning every output (sys.exit, os._exit or a "
                     "crash): a solution returns its results and never ends the process")
        results = []
        for j, (exercise, _, job_worlds) in enumerate(jobs):
            judge = grader(exercise).judge
            per_world = {}
            for w in job_worlds or worlds:
                merged: dict[str, list] = {}
                missing = []
                for r in range(w):
                    outputs = rank_file(Path(outdir, f"{j}-{w}-{r}.pt"))
                    if not outputs or outputs[-1][0] != DONE:
                        missing.append(r)
                    results_by_name = dict(outputs)
                    results_by_name.pop(DONE, None)
                    for name, ok, why in judged(judge, results_by_name, r, w, seed):
                        row = merged.setdefault(name, [True, why])
                        if not ok and row[0]:
                            row[0], row[1] = False, f"rank {r}: {why}"
                rows = [(name, ok, why) for name, (ok, why) in merged.items()]
                if missing:
                    rows.append((FINISHED, False, f"ranks {missing} stopped before the end: {crash}"))
                per_world[w] = rows
            results.append(per_world)
        return results


def rank_file(path: Path) -> list:
    """A rank's [(check, {"value": ...} or {"raised": why})], or [] when it wrote none that reads as one."""
    import torch

    try:
        outputs = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # missing, or not what a rank writes
        return []
    rows = []
    for entry in outputs if isinstance(outputs, list) else []:
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str) and well_formed(entry[1]):
            rows.append(entry)
    return rows


def judged(judge, results: dict, rank: int, world: int, seed: int) -> list[tuple[str, bool, str]]:
    """This process's verdicts on one rank's outputs: the grader's ``judge`` once the solution loaded, or the
    rows for what stopped it (it could not be imported, the process group did not start)."""
    stops = [(name, False, one_line(results[name]["raised"])) for name in (START, LOAD)
             if name in results and "raised" in results[name]]
    if stops:
        return stops
    if not results:
        return []  # a rank that wrote nothing: the FINISHED row says why
    try:
        return judge(results, rank, world, seed)
    except Exception as e:  # outputs of a shape no honest solution returns
        return [("outputs of the solution", False, describe(e))]


def result(results: dict, name: str):
    """For a grader's ``judge``: what the solution returned for one check on this rank, or SolutionRaised."""
    if name not in results:
        raise SolutionRaised("no output for this check: the rank stopped before it")
    return value(results[name])


def report(g, per_world: dict) -> None:
    """The rows of one job; ranks that stopped before the end stop the grading (one line, SolutionStopped)."""
    for w, rows in per_world.items():
        for name, ok, why in rows:
            if name == FINISHED and not ok:
                raise SolutionStopped(f"{w} ranks: {why}")
    for w, rows in per_world.items():
        for name, ok, why in rows:
            g.check(f"{w} ranks: {name}", ok, why)


@contextlib.contextmanager
def only_point_to_point():
    """Inside: every collective raises, and sends are counted (elements per rank). Both where a solution calls them
    (torch.distributed's functions, by name in the message) and on the process group class every Python call goes
    through (torch.distributed.distributed_c10d.all_reduce, or group.allreduce, is the same collective)."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import ProcessGroup

    banned = ["all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
              "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "all_reduce_coalesced"]
    group_banned = [m for m in dir(ProcessGroup) if not m.startswith("_") and callable(getattr(ProcessGroup, m))
                    and m.startswith(("all", "reduce", "broadcast", "gather", "scatter"))]
    saved = {name: getattr(dist, name) for name in banned if hasattr(dist, name)}
    # the class's own entries (an inherited one is deleted again): what getattr returns would not restore it
    group_saved = {name: ProcessGroup.__dict__.get(name) for name in [*group_banned, "send"]}
    original_send = ProcessGroup.send
    counter = {"elements": 0, "collectives": []}

    def ban(name):
        def refused(*args, **kwargs):
            counter["collectives"].append(name)
            raise RuntimeError(f"dist.{name} was called: this exercise allows only send/recv (isend/irecv)")
        return refused

    def send(group, tensors, *args, **kwargs):  # dist.send and dist.isend both end here
        counter["elements"] += sum(t.numel() for t in tensors)
        return original_send(group, tensors, *args, **kwargs)

    for name, fn in saved.items():
        setattr(dist, name, ban(name))
    for name in group_banned:
        setattr(ProcessGroup, name, ban(name))
    ProcessGroup.send = send
    try:
        yield counter
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)
        for name, fn in group_saved.items():
            if fn is None:
                delattr(ProcessGroup, name)
            else:
                setattr(ProcessGroup, name, fn)
