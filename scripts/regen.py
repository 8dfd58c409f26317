"""Regenerate result records: `python -m scripts.regen [DEMO ...] [--stale] [--device cpu|cuda|auto]`.

Runs each demo in its own process (`python -m demos.<topic>.<demo> --device ...`) and process group,
shows progress, and ends with a summary table (demo, device, status, wall time). A failing demo is
reported with its last error line and the others still run; the exit code is then 1. A demo writes
its record only when it finished, atomically, so a failure leaves the previous record untouched.

- ``--timeout`` is a hard wall-clock limit per demo (finite, above 0): it fires whether or not the demo
  prints, and kills the demo's whole process group (its workers and compilers too) and every process it
  started that left the group (``setsid()``), found below regen in /proc.
- One regeneration of a demo on a device class at a time: a lock per demo and class
  (.cache/regen/locks/), so a second regen of the same demo fails at once with one line instead of
  racing the first for the machine and the record.
- SIGTERM or SIGINT to regen kills the running demo's process group before regen exits: no orphan. Regen
  then says in one line what was interrupted (records already written are kept) and exits 130 (Ctrl-C)
  or 143 (SIGTERM).
- ``--results-dir`` is read relative to the directory regen was started from.
- Each run's full output goes to its own log, .cache/regen/<demo>-<device>-<UTC time>-<pid>.log
  (the newest few per demo and device are kept).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text


from demos.harness.cli import DEVICES, SIZE_PRESETS, results_dir_option
from records.errors import OneLineParser, fail
from records.paths import CACHE_DIR, DEMOS_DIR, REPO_ROOT, RESULTS_DIR, shown
from records import catalog, datasheets

LOG_DIR = CACHE_DIR / "regen"
LOCK_DIR = LOG_DIR / "locks"
LOGS_KEPT = 5  # per demo and device


@dataclass
class Outcome:
    demo: str
    device: str
    ok: bool
    seconds: float
    detail: str  # the record written, or the error's last line
    status: str = ""  # ok | failed | timeout | busy (another regen holds the demo's lock)
    log: Path | None = None

    def __post_init__(self):
        self.status = self.status or ("ok" if self.ok else "failed")


BUSY_RETRY_S = 30  # the pause before a demo the harness refused as "machine busy" is measured once more


def refused_as_busy(text: str) -> bool:
    """The harness refused an unstable measurement (demos/harness/timing.py, run.py) and wrote nothing. A shared
    machine's load comes and goes over minutes: the policy (regen's and the scaffold's) is to measure once more
    after BUSY_RETRY_S, never to keep the noise."""
    return "machine busy:" in text

def resolve_device_class(device: str) -> str:
    """The device class a run on --device will record (the harness's own resolver; it also refuses
    --device cuda without a GPU, in one line). --device cpu needs no torch."""
    if device == "cpu":
        return "cpu"
    from demos.harness.device import resolve

    return resolve(device).device_class


def is_stale(demo: catalog.Demo, device_class: str, results_dir: Path) -> bool:
    """Missing, malformed or made by other code than the demo's current code."""
    return catalog.record_freshness(demo, device_class, results_dir) != "fresh"


# -- one demo, one process group, one hard deadline ------------------------------------------------

def _prctl():
    """Linux's prctl, or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


def _die_with_parent():
    """For Popen's preexec_fn: the demo gets SIGKILL when regen itself dies, even by SIGKILL (Linux's
    PR_SET_PDEATHSIG), so a regen killed without a chance to clean up leaves no demo holding the machine."""
    if _PRCTL is None:
        return None
    return lambda: _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


_PREEXEC = _die_with_parent()


def adopt_orphans() -> None:
    """Make this process a child subreaper (Linux's PR_SET_CHILD_SUBREAPER): a process below it whose parent
    dies, such as a worker that left the demo's group with setsid() and outlived the demo, is re-parented
    here instead of to init, so it stays in reach of kill_everything."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_CHILD_SUBREAPER, 1)


def descendants(pid: int, spared: set[int] = frozenset()) -> set[int]:
    """Every process below pid, from the parent links in /proc (an empty set where there is no /proc), but for
    the ``spared`` ones and everything below them."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):  # a process that ended while we read
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found and child not in spared:
                found.add(child)
                todo.append(child)
    return found


def kill_everything(proc: subprocess.Popen, spared: set[int]) -> None:
    """Kill the demo and all it started: its process group (start_new_session=True makes its pgid its pid), and
    every process below this one that was not there before the demo started (``spared``, and what runs below
    them): that catches a worker that left the group with setsid(), below the demo while the demo lives and
    re-parented here (adopt_orphans) once it is gone. One command runs at a time per process (regen, the
    campaign and the tests all run demos one after another), so whatever else appeared here is the demo's.
    A few rounds, for a process that forks while the previous round kills."""
    me = os.getpid()
    for _ in range(3):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        strays = descendants(me, spared) - {proc.pid}
        for pid in strays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in strays:  # an adopted orphan is our child now: reap it, or it stays a zombie
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        if not strays:
            break
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def seconds(text: str) -> float:
    """The argparse type of a deadline option (regen's --timeout, the campaign's --demo-limit-s): a finite number
    of seconds above 0. nan would never fire, and 0 or less would fire at once."""
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text}: expected a finite number of seconds above 0")
    return value


@dataclass
class Finished:
    returncode: int | None
    timed_out: bool
    last_lines: list[str]
    seconds: float


def run_with_deadline(command: list[str], log_path: Path, timeout: float, env: dict | None = None,
                      cwd: Path = REPO_ROOT, on_line=None) -> Finished:
    """Run command in its own process group, its output to log_path, killed (whole group) at ``timeout``.

    A reader thread moves the output into a queue, so the deadline is kept by this thread whether or not
    the command prints anything. An exception here (KeyboardInterrupt, or SystemExit from SIGTERM, see
    ``signals_raise``) kills the group before it propagates. Whatever the command started is killed when it
    ends, however it ends (kill_everything)."""
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout {timeout!r}: expected a finite number of seconds above 0")  # nan never fires
    adopt_orphans()
    spared = descendants(os.getpid())  # what ran below this process before the command: not the command's
    started = time.perf_counter()
    deadline = started + timeout
    lines: queue.Queue = queue.Queue()
    last_lines: list[str] = []
    timed_out = False
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", env=env, start_new_session=True, preexec_fn=_PREEXEC)

        def pump():
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            while True:
                left = deadline - time.perf_counter()
                if left <= 0:
                    kill_everything(proc, spared)
                    timed_out = True
                    break
                try:
                    line = lines.get(timeout=min(left, 0.5))
                except queue.Empty:
                    if proc.poll() is not None:  # it ended, but a worker it left holds the output open: kill it
                        kill_everything(proc, spared)
                    continue
                if line is None:
                    break
                log.write(line)
                log.flush()
                line = line.rstrip()
                if line:
                    last_lines = (last_lines + [line])[-30:]
                    if on_line is not None:
                        on_line(line, time.perf_counter() - started)
            if timed_out:
                last_lines.append(f"timed out after {timeout:.0f} s (its process group was killed)")
                log.write(last_lines[-1] + "\n")
            proc.wait()
            kill_everything(proc, spared)  # a worker the demo forked must not outlive it, even when it ended well
        except BaseException:
            kill_everything(proc, spared)
            proc.wait()
            raise
        finally:
            reader.join(timeout=5)
    return Finished(proc.returncode, timed_out, last_lines, time.perf_counter() - started)


@contextlib.contextmanager
def signals_raise():
    """While inside, SIGTERM raises SystemExit (SIGINT already raises KeyboardInterrupt), so the
    cleanup in run_with_deadline runs and kills the demo's process group instead of orphaning it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Busy(Exception):
    """Another regen holds this demo's lock on this device class."""


@contextlib.contextmanager
def demo_lock(demo: str, device_class: str):
    """An exclusive lock per demo and device class (flock: released by the kernel if the holder dies)."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    path = LOCK_DIR / f"{demo}-{device_class}.lock"
    with open(path, "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            raise Busy(f"another regen of {demo} on {device_class} is running (pid {holder}); "
                       "wait for it to finish instead of racing it for the machine and the record") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)


def new_log_path(log_dir: Path, demo: str, device: str) -> Path:
    """A log of its own for each run; older logs of the same demo and device beyond LOGS_KEPT are removed."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    path = log_dir / f"{demo}-{device}-{stamp}-{os.getpid()}.log"
    older = sorted(log_dir.glob(f"{demo}-{device}-2*.log"))
    for old in older[:max(0, len(older) - (LOGS_KEPT - 1))]:
        old.unlink(missing_ok=True)
    return path


def remove_leftover_temp_files(results_dir: Path, demo: str) -> None:
    """A demo killed mid-write leaves its atomic write's temporary file (.<name>.*.tmp): remove it."""
    for tmp in (Path(results_dir) / demo).glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


def run_demo(demo: catalog.Demo, device: str, size: str | None, results_dir: Path, console: Console,
             timeout: float, env: dict | None = None, device_class: str | None = None,
             log_dir: Path | None = None, extra_args: list[str] | None = None) -> Outcome:
    results_dir = Path(results_dir).absolute()
    command = [sys.executable, "-u", "-m", demo.module, "--device", device, "--results-dir", str(results_dir)]
    if size:
        command += ["--size", size]
    command += extra_args or []
    log_path = new_log_path(log_dir or LOG_DIR, demo.name, device)
    started = time.perf_counter()
    try:
        with demo_lock(demo.name, device_class or device), \
                console.status(f"{demo.name} on {device} ...") as status:

            def show(line: str, elapsed: float) -> None:
                if console.is_terminal:
                    status.update(f"{demo.name} on {device} [{elapsed:5.0f} s] {line[:100]}")
                else:
                    console.print(f"  [{demo.name} {elapsed:5.0f}s] {line}", markup=False, highlight=False)

            try:
                done = run_with_deadline(command, log_path, timeout, env, on_line=show)
            except BaseException:
                remove_leftover_temp_files(results_dir, demo.name)
                raise
    except Busy as e:
        return Outcome(demo.name, device, False, time.perf_counter() - started, str(e), status="busy")
    if done.timed_out:
        remove_leftover_temp_files(results_dir, demo.name)
    last_lines = done.last_lines
    if done.returncode == 0 and not done.timed_out:
        written = [line for line in last_lines if line.startswith("wrote ")]
        return Outcome(demo.name, device, True, done.seconds,
                       written[-1].removeprefix("wrote ") if written else "ok", log=log_path)
    if done.timed_out:
        error = last_lines[-1]
    else:
        error = next((line for line in reversed(last_lines) if line.strip() and not line.startswith(" ")), "failed")
    return Outcome(demo.name, device, False, done.seconds,
                   f"{error} (exit {done.returncode}; log: {shown(log_path)})",
                   status="timeout" if done.timed_out else "failed", log=log_path)


def summary_table(outcomes: list[Outcome]) -> Table:
    table = Table(title="regen summary")
    for col in ("demo", "device", "status", "wall time", "record / error"):
        table.add_column(col)
    for o in outcomes:
        table.add_row(o.demo, o.device, "[green]ok[/]" if o.ok else f"[red]{'FAILED' if o.status == 'failed' else o.status.upper()}[/]", f"{o.seconds:.1f} s",
                      Text(o.detail), style=None if o.ok else "red")  # a demo's error is text, never markup
    return table


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="regen", description=__doc__.splitlines()[0])
    parser.add_argument("demos", nargs="*", help="demo names (default: all)")
    parser.add_argument("--stale", action="store_true", help="only demos whose record is missing or stale")
    parser.add_argument("--device", default="cpu", help="cpu (default) | cuda | auto")
    parser.add_argument("--size", default=None, help="tiny | small | full (default: the device's)")
    parser.add_argument("--results-dir", default=str(RESULTS_DIR))
    parser.add_argument("--timeout", type=seconds, default=900.0, help="seconds per demo (a hard limit)")
    parser.add_argument("--demos-dir", type=Path, default=DEMOS_DIR, help=argparse.SUPPRESS)  # tests: fake demos
    args = parser.parse_args(argv)
    if args.device not in DEVICES:
        fail(f"unknown device {args.device!r}: choose one of {', '.join(DEVICES)}")
    if args.size is not None and args.size not in SIZE_PRESETS:
        fail(f"unknown size {args.size!r}: choose one of {', '.join(SIZE_PRESETS)}")
    # the demos' own rule (not empty, no tiny run into docs/results, writable), checked before any demo runs;
    # relative to where regen was started, not the repository
    args.results_dir = results_dir_option(args.results_dir, args.size)
    datasheets.require()  # every record's digest and gate read it: a nan peak is one line here, not a traceback
    try:
        demos = catalog.discover(args.demos_dir.absolute())
    except ValueError as e:
        fail(str(e))
    unknown = [d for d in args.demos if d not in demos]
    if unknown:
        fail(f"unknown demo {unknown[0]!r}: known demos are {', '.join(demos)}")
    device_class = resolve_device_class(args.device)  # also refuses --device cuda without a GPU
    try:  # readers after what they read, the record gate last: a reader sees this generation's records
        chosen = catalog.readers_last([demos[d] for d in args.demos] if args.demos else list(demos.values()))
    except ValueError as e:
        fail(str(e))
    readers: set[str] = set()  # with --stale: fresh now, stale once what they read is regenerated
    if args.stale:
        stale = {d.name for d in chosen if is_stale(d, device_class, args.results_dir)}
        readers = catalog.readers_of(chosen, stale)
        chosen = [d for d in chosen if d.name in stale or d.name in readers]

    console = Console(highlight=False)
    if not console.is_terminal:  # CI logs: full lines, no wrapping at 80 columns
        console = Console(highlight=False, width=200)
    if not chosen:
        console.print(f"regen: every record for {device_class} is fresh; nothing to do")
        return 0
    console.print(f"regen: {len(chosen)} demo(s) on {args.device} ({device_class}): {', '.join(d.name for d in chosen)}"
                  + (f" (of which {', '.join(sorted(readers))} only if what they read changes)" if readers else ""))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    outcomes: list[Outcome] = []
    running = None  # the demo being regenerated, for the line an interruption prints
    try:
        with signals_raise():
            for i, demo in enumerate(chosen, 1):
                if demo.name in readers and not is_stale(demo, device_class, args.results_dir):
                    console.print(f"[{i}/{len(chosen)}] {demo.name}: fresh (what it reads did not change)")
                    continue
                running = demo.name
                console.print(f"[{i}/{len(chosen)}] {demo.name} ({demo.module})")
                outcome = run_demo(demo, args.device, args.size, args.results_dir, console, args.timeout, env,
                                   device_class=device_class)
                if not outcome.ok and outcome.status == "failed" and refused_as_busy(outcome.detail):
                    console.print(f"[{i}/{len(chosen)}] {demo.name}: machine busy; "
                                  f"measuring once more in {BUSY_RETRY_S} s")
                    time.sleep(BUSY_RETRY_S)
                    outcome = run_demo(demo, args.device, args.size, args.results_dir, console, args.timeout, env,
                                       device_class=device_class)
                if outcome.status == "busy":
                    console.print(f"error: {outcome.detail}", markup=False, highlight=False)
                else:
                    console.print(f"[{i}/{len(chosen)}] {demo.name}: {'ok' if outcome.ok else 'FAILED'} "
                                  f"in {outcome.seconds:.1f} s")
                outcomes.append(outcome)
                running = None
    except (KeyboardInterrupt, SystemExit) as e:
        if isinstance(e, SystemExit) and e.code != 128 + signal.SIGTERM:
            raise
        # Ctrl-C or SIGTERM: the running demo's group is already killed (run_with_deadline). One line, no traceback.
        print(interrupted_line("Ctrl-C" if isinstance(e, KeyboardInterrupt) else "SIGTERM", running,
                               sum(o.ok for o in outcomes)), file=sys.stderr)
        return 130 if isinstance(e, KeyboardInterrupt) else e.code
    console.print(summary_table(outcomes))
    failed = [o for o in outcomes if not o.ok]
    if failed:
        console.print(f"regen: {len(failed)} of {len(outcomes)} failed; their previous records are untouched")
        return 1
    return 0


def interrupted_line(how: str, running: str | None, written: int) -> str:
    """What an interrupted regen says: what it stopped, and that nothing already measured is lost."""
    return (f"regen: interrupted ({how})" + (f" while {running} ran" if running else "")
            + f"; the {written} record(s) already written are kept"
            + (f", and {running}'s previous record is untouched" if running else ""))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # before any demo ran (while reading the catalog, importing torch)
        print(interrupted_line("Ctrl-C", None, 0), file=sys.stderr)
        sys.exit(130)
