"""``start()``: what a demo calls first. It returns a Run that times, checks and records.

    run = start("kernel_fusion", title="...", sizes={"tiny": ..., "small": ..., "full": ...})
    run.check_close("bias_gelu.eager", got, reference, rtol=..., atol=...)   # raises on failure
    t = run.time(lambda: f(x))                                              # the timing protocol
    run.metric("bias_gelu.eager.gbps", value, "GB/s", ceiling="copy_bandwidth")
    run.save()                                                              # atomic write

Nothing is written until ``save()``, and a failed check raises before it, so a demo that breaks
leaves the previous record untouched.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import inspect
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from records import record, units
from demos.harness import ceilings, device as devices, provenance, threads
from demos.harness.cli import parse_options
from records.digest import source_digest
from records.paths import CACHE_DIR, REPO_ROOT, shown
from demos.harness import timing as protocol
from demos.harness.timing import Settings, Timing, measure
from records.errors import fail
from records.plausibility import ceiling_drift, drift_max

DEFAULT_SIZE = {"cpu": "small", "cuda": "full"}


def _fresh_compile_caches() -> None:
    """Point Inductor's and Triton's caches at an empty folder for this run, removed at exit.

    Compile times in a record are therefore always cold-cache times, whatever ran before.
    """
    root = CACHE_DIR / "compile"
    root.mkdir(parents=True, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="run-", dir=root)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(folder, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)


def _jax_takes_memory_as_needed() -> None:
    """JAX grabs 75% of GPU memory when its GPU backend starts, leaving PyTorch a quarter of the card;
    a demo that uses both would run out of memory. Set before any demo imports jax."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


class Run:
    def __init__(self, demo: str, title: str, sizes: dict, demo_file: Path | None, argv=None,
                 cpu_threads: int | None = None):
        self.started = time.perf_counter()
        self.startup_s = provenance.process_age_s()  # interpreter start and imports, before start() ran
        self.spent = {"ceilings_s": 0.0, "first_calls_s": 0.0, "timed_s": 0.0}
        self.demo, self.title, self.demo_file = demo, title, demo_file
        self.options = parse_options(demo, argv)
        _jax_takes_memory_as_needed()
        self.device = devices.resolve(self.options.device)
        # The record's path is known once the device class is: refuse one that cannot become a file now (the
        # options already tried writing in its folder), not after the run.
        self.record_path = record.record_path(self.options.results_dir, demo, self.device.device_class)
        if self.record_path.exists() and not self.record_path.is_file():
            fail(f"{shown(self.record_path)} is not a file (a folder?): the record cannot be written there; "
                 "nothing was measured")
        devices.use_triton_interpreter_on_cpu(self.device)
        self.host_allocator = devices.keep_freed_host_memory() if self.device.kind == "cpu" else None
        self.size = self.options.size or DEFAULT_SIZE[self.device.kind]
        self.sizes = sizes[self.size]
        self.settings = Settings(flush_l2=self.device.is_gpu,
                                 refuse_unstable=self.device.kind == "cpu" and self.size != "tiny")
        torch.manual_seed(self.options.seed)
        _fresh_compile_caches()

        self.metrics: dict[str, dict] = {}
        self.tables: list[dict] = []
        self.series_list: list[dict] = []
        self.checks: list[dict] = []
        self.not_run_list: list[dict] = []
        self.artifacts: dict[str, str] = {}

        self.log(f"{demo}: device {self.device.kind} ({self.device.name}, class {self.device.device_class}), "
                 f"size {self.size}, torch {torch.__version__}, {threads.count()} threads")
        self.log("measuring this machine's ceilings (copy bandwidth, fp32 and bf16 matmul) ...")
        with self._spending("ceilings_s"):
            self.ceilings = ceilings.measure_ceilings(self.device, self.size, self.settings)
        for name, c in self.ceilings.items():
            self.log(f"  ceiling {name}: {c['value']:.3g} {c['unit']}  ({c['how']})")
        # The thread policy (demos/harness/threads.py): applied after the opening ceilings, which use
        # every thread, and undone before the closing ones. Only on a CPU: a GPU run is not limited.
        self.machine_threads = threads.count()
        self.thread_limit = None
        if cpu_threads is not None and not self.device.is_gpu:
            self.thread_limit = threads.limit(cpu_threads)
            self.log(f"this demo runs on {cpu_threads} CPU thread(s) (PyTorch, BLAS, XLA: "
                     f"{self.thread_limit.xla}); the ceilings use all {self.machine_threads}")
        self.timing_threads: set[int] = set()

    @contextlib.contextmanager
    def _spending(self, part: str):
        """Add the time spent inside the block to one part of the run's wall time (wall_time_parts)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.spent[part] += time.perf_counter() - t0

    def wall_time_parts(self, wall_s: float) -> dict:
        parts = {k: round(v, 3) for k, v in self.spent.items()}
        parts["other_s"] = round(max(wall_s - sum(self.spent.values()), 0.0), 3)
        if self.startup_s is not None:
            parts["startup_s"] = round(self.startup_s, 3)
        return parts

    # -- helpers a demo uses ------------------------------------------------------------------
    @staticmethod
    def log(message: str) -> None:
        print(message, flush=True)

    @property
    def torch_device(self) -> torch.device:
        return self.device.torch_device

    @property
    def cpu_threads(self) -> int:
        """Threads the demo's work runs with (on a GPU run: the host's, for host-side libraries)."""
        return self.thread_limit.threads if self.thread_limit else self.machine_threads

    def cache_resident(self, working_set_bytes: int, flush: bool | None = None) -> bool:
        """Whether a kernel touching this many bytes is timed from a cache rather than from memory: on a
        CPU when it fits in the last-level cache; on a GPU only when timed without the L2 flush and it
        fits in L2. Pass the answer to ``metric(..., cache_resident=...)`` for its bandwidth."""
        if self.device.is_gpu:
            flushed = self.settings.flush_l2 if flush is None else flush
            return not flushed and working_set_bytes <= self.device.l2_bytes
        llc = provenance.cpu_llc_bytes()
        return llc is not None and working_set_bytes <= llc

    def time(self, fn, flush: bool | None = None) -> Timing:
        """Time fn() with the harness protocol (first call apart, warm-up, repeats, L2 flush on GPU).

        ``flush=False`` times back-to-back calls without the L2 flush: on a GPU the queued flush
        gives the host time to run ahead, hiding per-call host overhead (guards, wrappers,
        launches); without it that overhead shows whenever it exceeds the kernel's time."""
        settings = self.settings if flush is None else dataclasses.replace(self.settings, flush_l2=flush)
        self.timing_threads.add(threads.count())
        with self._spending("timed_s"):
            return measure(fn, self.device, settings, where=protocol.caller())

    def first_call(self, fn):
        """Call fn() once, synchronised: (its output, seconds). For a torch.compile'd function on a new
        shape this is trace + compile + one run, which is why it is reported apart from steady state."""
        self.timing_threads.add(threads.count())
        with self._spending("first_calls_s"):
            self.device.sync()
            t0 = time.perf_counter()
            out = fn()
            self.device.sync()
            return out, time.perf_counter() - t0

    def check(self, name: str, passed: bool, detail: str) -> None:
        """Record a correctness check; raise if it failed (so nothing gets saved)."""
        self.checks.append({"name": name, "passed": bool(passed), "detail": detail})
        self.log(f"  check {'ok  ' if passed else 'FAIL'} {name}: {detail}")
        if not passed:
            raise AssertionError(f"correctness check failed: {name}: {detail}")

    def check_wrong(self, name: str, caught: bool, detail: str) -> None:
        """For a variant that is wrong on purpose (a missing all-reduce, an unscaled FP16 step): the
        check passes when the demo's comparison *catches* the error. Raises if it did not: a check
        that cannot tell the wrong variant from the right one proves nothing."""
        self.checks.append({"name": name, "passed": bool(caught), "detail": detail, "expected_failure": True})
        self.log(f"  check {'ok  ' if caught else 'FAIL'} {name} (a wrong variant, caught as such): {detail}")
        if not caught:
            raise AssertionError(f"a deliberately wrong variant was not caught: {name}: {detail}")

    def check_close(self, name: str, got: torch.Tensor, reference: torch.Tensor, *, rtol: float, atol: float,
                    reference_name: str = "float64 reference") -> None:
        """|got - reference| <= atol + rtol * |reference| everywhere, computed in float64 on the device both live on
        (a GPU-sized array is never copied to the host for its check); on the host when they live apart."""
        where = got.device if got.device == reference.device else "cpu"
        got64, ref64 = got.detach().to(where, torch.float64), reference.detach().to(where, torch.float64)
        if got64.shape != ref64.shape:
            self.check(name, False, f"shape {tuple(got64.shape)} differs from the reference's {tuple(ref64.shape)}")
        err = (got64 - ref64).abs()
        allowed = atol + rtol * ref64.abs()
        finite = bool(torch.isfinite(got64).all())
        passed = finite and bool((err <= allowed).all())
        worst = float(err.max()) if err.numel() else 0.0
        self.check(name, passed, f"max |err| {worst:.2e} vs {reference_name} "
                                 f"(allowed {atol:.0e} + {rtol:.0e}*|ref|){'' if finite else ', non-finite values'}")
        self.checks[-1].update({"max_abs_err": worst, "rtol": rtol, "atol": atol})

    # Byte-rate kinds, as the record schema lists them: "memory" (the default), "link" (between devices
    # or nodes: NVLink, a network), "host_link" (host <-> device, one way: PCIe, NVLink-C2C; the check
    # bounds it by the datasheet's host_link_gbps, not by HBM), "cache".
    def metric(self, name: str, value: float, unit: str, label: str | None = None,
               ceiling: str | None = None, dtype: str | None = None, kind: str | None = None,
               cache_resident: bool = False, signed: bool = False, origin: str = "measured") -> None:
        """A named measured value. With ``ceiling``, its fraction of that same-run ceiling is stored too.

        Rates say what bounds them, so the check can compare them with the right datasheet peak: a
        FLOP rate its ``dtype`` (taken from a matmul ceiling when one is named), a byte rate its
        ``kind`` ("memory", the default; "link" for a network or PCIe; "cache"), and a measurement
        whose working set fits in a cache says ``cache_resident=True`` (it may beat the memory ceiling). A time
        that may fall below zero (a fitted slope, a difference) says ``signed=True``; the unit is one of
        records/units.py's, checked here so a new demo learns it before its run, not at its save. A value that was not
        measured in this run says what it is: ``origin="computed"`` (a formula or a model evaluated here),
        ``"datasheet"`` (a datasheet figure, or computed from datasheet figures only) or ``"static"`` (static
        analysis of compiled code: ptxas, SASS); the site labels it so, never with this run's device."""
        why = units.problem(unit)
        if why:
            raise ValueError(f"metric {name}: {why}")
        entry = {"value": float(value), "unit": unit}
        if label:
            entry["label"] = label
        if ceiling is not None:
            c = self.ceilings[ceiling]
            if c["unit"] != unit:
                raise ValueError(f"metric {name} is in {unit} but ceiling {ceiling} is in {c['unit']}")
            entry["ceiling"] = ceiling  # its fraction is computed in save(), against the final ceiling
            dtype = dtype or c.get("dtype")
        if dtype is not None:
            entry["dtype"] = dtype
        if kind is not None:
            entry["kind"] = kind
        if cache_resident:
            entry["cache_resident"] = True
        if signed:
            entry["signed"] = True
        if origin not in record.ORIGINS:
            raise ValueError(f"metric {name}: origin {origin!r} is not one of {', '.join(record.ORIGINS)}")
        if origin != "measured":
            entry["origin"] = origin
        self.metrics[name] = entry

    def table(self, name: str, title: str, columns: list[str], rows: list[list]) -> None:
        self.tables.append({"name": name, "title": title, "columns": columns, "rows": rows})

    def series(self, name: str, title: str, x_label: str, y_label: str, lines: dict[str, tuple[list, list]],
               hlines: dict[str, float] | None = None, x_log: bool = False, y_log: bool = False,
               kind: str | None = None, computed: bool = False) -> None:
        """A plot's data: ``lines`` maps a label to (xs, ys), or to (xs, ys, spreads) for measured times: each
        point's Timing (or its p90/p10 spread, or None), so the plot can flag the points whose samples scattered
        (website/plots.NOISY_SPREAD). ``hlines`` maps a label to a level. ``kind`` says how to draw it ("bar",
        "gantt", "steps": see the record schema); ``computed=True`` marks a projection from a model, which the page
        titles as such instead of naming this machine as its measurer."""
        entry = {
            "name": name, "title": title, "x_label": x_label, "y_label": y_label, "x_log": x_log, "y_log": y_log,
            "lines": [_line(k, *v) for k, v in lines.items()],
            "hlines": [{"label": k, "y": float(v)} for k, v in (hlines or {}).items()],
        }
        if kind is not None:
            entry["kind"] = kind
        if computed:
            entry["computed"] = True
        self.series_list.append(entry)

    def not_run(self, variant: str, reason: str) -> None:
        """A variant that cannot run here is recorded with the reason, never silently dropped."""
        self.not_run_list.append({"variant": variant, "reason": reason})
        self.log(f"  not run here: {variant}: {reason}")

    def artifact(self, name: str, text: str) -> None:
        self.artifacts[name] = text

    # -- the record -----------------------------------------------------------------------------
    def to_record(self) -> dict:
        digest = source_digest(self.demo_file, self.device.device_class)
        return {
            "schema": record.SCHEMA_VERSION,
            "demo": self.demo,
            "module": ".".join(self.demo_file.relative_to(REPO_ROOT).with_suffix("").parts),
            "title": self.title,
            "device_class": self.device.device_class,
            "size": self.size,
            "source_digest": digest.value,
            "source_files": digest.files,
            "inputs": digest.inputs,
            "metrics": self.metrics,
            "tables": self.tables,
            "series": self.series_list,
            "checks": self.checks,
            "not_run": self.not_run_list,
            "artifacts": self.artifacts,
            "ceilings": self.ceilings,
            "settings": {**self.settings.as_dict(), "seed": self.options.seed, "sizes": repr(self.sizes),
                         "host_allocator": self.host_allocator, "cpu_threads": self.thread_policy(), "protocol_version": digest.protocol},
            "provenance": provenance.collect(self.device, torch, self.timed_with_threads(), digest.files),
            "stability": self.stability(),
            "wall_time_s": (wall := time.perf_counter() - self.started),
            "wall_time_parts": self.wall_time_parts(wall),
        }

    def stability(self) -> dict:
        """What the timing protocol's guard saw (timing.py): every measurement of this run, ceilings included,
        with how many samples were preempted, their spread, the attempts, and the machine's load around it."""
        taken = protocol.journal
        loads = [t.load_1min for t in taken if t.load_1min is not None]
        others = [t.others_cores for t in taken if t.others_cores is not None]
        return {
            "rule": protocol.RULE,
            "measurements": len(taken),
            "remeasured": sum(t.attempts > 1 for t in taken),
            "unstable": sum(not t.stable for t in taken),
            "samples": sum(t.repeats for t in taken),
            "preempted_samples": sum(t.preempted or 0 for t in taken),
            "worst_spread": round(max((t.spread for t in taken), default=1.0), 3),
            "load_1min": [round(min(loads), 2), round(max(loads), 2)] if loads else None,
            "others_cores_max": round(max(others), 3) if others else None,
            "cpu_count": os.cpu_count(),
            "timings": [{"where": t.where, "median_s": t.median_s, "best_s": t.best_s, "spread": round(t.spread, 3),
                         "samples": t.repeats, "preempted": t.preempted, "attempts": t.attempts, "stable": t.stable,
                         "involuntary_switches": t.switches,
                         "load_1min": None if t.load_1min is None else round(t.load_1min, 2),
                         "others_cores": None if t.others_cores is None else round(t.others_cores, 3)}
                        for t in taken[:500]],
        }

    def timed_with_threads(self) -> int:
        """The thread count every timing of this run used (one count: a demo runs under one policy)."""
        counts = self.timing_threads or {self.cpu_threads}
        if len(counts) > 1:
            raise RuntimeError(f"timings of {self.demo} ran with different thread counts {sorted(counts)}: "
                               "thread counts belong to the harness (start(..., cpu_threads=N)), not to the demo")
        return next(iter(counts))

    def thread_policy(self) -> dict:
        if self.thread_limit is None:
            return {"asked": None, "timings": self.timed_with_threads(), "ceilings": self.machine_threads}
        return {"asked": self.thread_limit.threads, "timings": self.timed_with_threads(),
                "ceilings": self.machine_threads, **{f"{k}_threads": v for k, v in self.thread_limit.as_dict().items()}}

    def finish_ceilings(self) -> None:
        """Measure the ceilings again (with every thread) and keep the better sample of each; fractions follow."""
        self.timed_with_threads()  # refuse a mixed-thread run before measuring anything more
        if self.thread_limit is not None:
            self.thread_limit.restore()
        if "samples" not in next(iter(self.ceilings.values())):
            opening = self.ceilings
            bound = drift_max(self.device.device_class)
            # The closing ceilings must agree with the opening ones (the publication gate's drift_max):
            # when they do not, the machine changed under the run; they are measured again, twice at most.
            for attempt in range(1, protocol.ATTEMPTS + 1):
                self.log("measuring the ceilings again, at the end of the run ...")
                with self._spending("ceilings_s"):
                    closing = ceilings.measure_ceilings(self.device, self.size, self.settings)
                self.ceilings = ceilings.combine(opening, closing)
                drift = ceiling_drift({"ceilings": self.ceilings})
                if max(drift.values(), default=1.0) <= bound:
                    break
            for name, c in self.ceilings.items():
                self.log(f"  ceiling {name}: {c['value']:.3g} {c['unit']} (samples {c['samples'][0]:.3g}, "
                         f"{c['samples'][1]:.3g})")
            worst = max(drift, key=drift.get)
            if drift[worst] > bound and self.settings.refuse_unstable:
                load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
                fail(f"machine busy: load {load:.1f} on {os.cpu_count()} cores; rerun when quiet (ceiling {worst}: "
                     f"start and end of the run differ {drift[worst]:.2f}x, more than {bound}x, in each of "
                     f"{protocol.ATTEMPTS} closing measurements)")
        for entry in self.metrics.values():
            if "ceiling" in entry:
                entry["fraction_of_ceiling"] = entry["value"] / self.ceilings[entry["ceiling"]]["value"]

    def save(self) -> Path | None:
        """Write docs/results/<demo>/<device class>.json atomically (validated first)."""
        self.finish_ceilings()
        if self.demo_file is None:
            self.log("not run as a script (no demo file): results are shown above, no record written")
            return None
        path = self.record_path  # checked in __init__, before the run
        rec = self.to_record()
        record.write(path, rec)
        self.log(f"wrote {shown(path)} in {time.perf_counter() - self.started:.1f} s")
        return path


def _line(label: str, xs, ys, spreads=None) -> dict:
    """One plotted line as the record holds it; ``spreads``: per point a Timing, a p90/p10 ratio or None."""
    line = {"label": label, "x": list(map(float, xs)), "y": [None if y is None else float(y) for y in ys]}
    if spreads is not None:
        spreads = [None if s is None else float(getattr(s, "spread", s)) for s in spreads]
        if len(spreads) != len(line["x"]) or any(s is not None and not s >= 1.0 for s in spreads):
            raise ValueError(f"series line {label!r}: one spread (p90/p10, at least 1) per point, got {spreads}")
        line["spread"] = spreads
    return line


def start(demo: str, title: str, sizes: dict, argv: list[str] | None = None, cpu_threads: int | None = None) -> Run:
    """Parse --device/--size, pick the device, measure ceilings, apply the thread policy, return the Run.

    ``cpu_threads``: on a CPU, the threads the demo's work runs with (PyTorch, BLAS, XLA); None keeps
    the machine's. Demos never set thread counts themselves (see demos/harness/threads.py)."""
    missing = {"tiny", "small", "full"} - set(sizes)
    if missing:
        raise ValueError(f"{demo}: sizes must define tiny, small and full (missing {sorted(missing)})")
    caller = Path(inspect.stack()[1].filename)
    demo_file = caller.resolve() if caller.suffix == ".py" and caller.is_file() else None
    if demo_file is not None and REPO_ROOT not in demo_file.parents:
        demo_file = None
    return Run(demo, title, sizes, demo_file, argv, cpu_threads)

