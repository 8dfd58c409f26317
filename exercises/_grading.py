"""What every grader shares: loading a solution file, checks with plain-words reasons, speed ratios.

A grader chooses the inputs, has the solution compute its outputs in a separate process
(``exercises._isolate.run_solution``: the grading process never imports the solution), and judges them
here: it calls ``g.run(name, fn)``, where ``fn`` returns ``(passed, why)``; an exception inside it is a FAIL
that names the exception (NotImplementedError reads "not implemented yet"), and so is one the solution
raised in its own process (``value`` turns it back into ``SolutionRaised``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
# How long a solution's process may run (the torch import included) before it is stopped: generous for an
# honest but slow attempt on a 2-core CPU, where every reference solution takes under 10 s. A grader may set
# its own TIME_LIMIT_S; ``python -m exercises --time-limit`` overrides both.
TIME_LIMIT_S = 60.0


class SolutionStopped(Exception):
    """The solution's process ended without returning every output (it exited, crashed, or ran past the time
    limit): nothing can be graded. The message is one line; the command prints it as ``stopped: ...``."""


class SolutionRaised(Exception):
    """An exception the solution raised in its own process, already described in plain words there."""


def shown(path: Path) -> str:
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def load_solution(path: Path | str) -> ModuleType:
    """Import a solution file by path, under a name unique to that path (several load side by side)."""
    path = Path(path).resolve()
    name = "exercise_solution_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton's jit and dataclasses look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def where(exc: BaseException) -> str:
    """" at <solution file>:<line>" for the innermost frame of the solution that raised exc, or ""."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if "exercises" in frame.filename and not any(k in frame.filename
                                                     for k in ("grader", "_grading", "_dist", "_isolate")):
            return f" at {shown(Path(frame.filename))}:{frame.lineno}"
    return ""


def describe(exc: BaseException) -> str:
    """An exception in plain words, with the line of the solution file it came from when there is one."""
    if isinstance(exc, SolutionRaised):  # described in the solution's process already
        return str(exc)
    if isinstance(exc, NotImplementedError):
        return "not implemented yet (the function still raises NotImplementedError)"
    text = str(exc).strip().splitlines()
    return f"raised {type(exc).__name__}{where(exc)}: {text[0][:200] if text else ''}"


def value(result: dict):
    """What the solution returned for one job (an entry of ``run_solution``'s list), or SolutionRaised."""
    if "raised" in result:
        raise SolutionRaised(result["raised"])
    return result["value"]


def kind(x) -> str:
    """The type of a returned object by name: what came back (``portable`` in the solution's process turns an
    object that cannot travel into the string "<its type>")."""
    if isinstance(x, str) and x.startswith("<") and x.endswith(">"):
        return x[1:-1]
    return type(x).__name__


@dataclass
class Row:
    status: str  # PASS, FAIL or SKIP
    name: str
    why: str


class StopGrading(Exception):
    """Raised by a fail-fast grader at its first FAIL (the project's tests of wrong solutions)."""


@dataclass
class Grader:
    device: str = "cpu"
    rows: list[Row] = field(default_factory=list)
    echo: bool = True
    fail_fast: bool = False
    seed: int = 0  # added to each grader's seeds: the command draws a fresh one per grade, the tests keep 0
    time_limit_s: float = TIME_LIMIT_S  # for the solution's process (see TIME_LIMIT_S)

    def add(self, status: str, name: str, why: str) -> None:
        self.rows.append(Row(status, name, why))
        if self.echo:
            print(f"  {status}  {name}: {why}", flush=True)

    def check(self, name: str, passed: bool, why: str) -> bool:
        self.add("PASS" if passed else "FAIL", name, why)
        if self.fail_fast and not passed:
            raise StopGrading(name)
        return passed

    def skip(self, name: str, why: str) -> None:
        self.add("SKIP", name, why)

    def run(self, name: str, fn: Callable[[], tuple[bool, str]]) -> bool:
        try:
            with warnings.catch_warnings():  # overflow and degrees-of-freedom warnings are noise in a grade
                warnings.simplefilter("ignore")
                passed, why = fn()
        except Exception as e:  # the attempt's bug is the grade, never a crash of the grader
            passed, why = False, describe(e)
        return self.check(name, bool(passed), why)

    @property
    def failed(self) -> list[Row]:
        return [r for r in self.rows if r.status == "FAIL"]

    def summary(self) -> str:
        counts = {s: sum(r.status == s for r in self.rows) for s in ("PASS", "FAIL", "SKIP")}
        verdict = "FAILED" if counts["FAIL"] or not counts["PASS"] else "ALL CHECKS PASSED"
        text = f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped: {verdict}"
        if counts["FAIL"]:
            text += "\nFailed: " + "; ".join(r.name for r in self.failed)
        return text


def close(actual, expected, *, atol: float, rtol: float = 0.0, what: str = "output") -> tuple[bool, str]:
    """Shape, dtype family and values (NaN where the expected has NaN, nowhere else) in plain words."""
    import torch

    if not isinstance(actual, torch.Tensor):
        return False, f"{what} is a {kind(actual)}, expected a tensor"
    if tuple(actual.shape) != tuple(expected.shape):
        return False, f"{what} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return False, f"{what} has dtype {actual.dtype}, expected {expected.dtype}"
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    if a.numel() == 0:
        return True, f"{what} is empty with the right shape"
    nan_a, nan_e = torch.isnan(a), torch.isnan(e)
    if (nan_a & ~nan_e).any():
        return False, f"{what} has {int((nan_a & ~nan_e).sum())} NaN where the reference has numbers"
    if (nan_e & ~nan_a).any():
        return False, f"{what} has numbers at {int((nan_e & ~nan_a).sum())} places where the policy says NaN"
    ok = ~nan_e
    a, e = a[ok], e[ok]
    inf_mismatch = (torch.isinf(a) | torch.isinf(e)) & (a != e)
    if inf_mismatch.any():
        return False, f"{what} has {int(inf_mismatch.sum())} infinities that differ from the reference"
    fin = torch.isfinite(e)
    err = (a[fin] - e[fin]).abs()
    bound = atol + rtol * e[fin].abs()
    worst = float(err.max()) if err.numel() else 0.0
    if (err > bound).any():
        i = int(torch.argmax(err - bound))
        return False, (f"{what} differs from the reference: max |error| {worst:.3g} "
                       f"(at one element: {float(a[fin][i]):.6g} vs {float(e[fin][i]):.6g}; tolerance {atol:g} + {rtol:g}*|ref|)")
    return True, f"max |error| {worst:.2g} (tolerance {atol:g} + {rtol:g}*|ref|)"


def best_time(fn: Callable[[], object], device, budget_s: float = 0.15) -> float:
    """The best of a few timed calls of fn (seconds), after one warm-up, timed by the harness's own timer
    (``device.time_calls``: a host clock with a sync on CPU, CUDA events on a GPU). The statistic is the
    minimum, not the harness's median: a grade asks whether the attempt *can* be as fast as the baseline,
    and the minimum resists a busy machine."""
    fn()
    device.sync()
    (probe,) = device.time_calls(fn, 1, False)
    repeats = max(2, min(50, int(budget_s / max(probe, 1e-9))))
    return min(probe, *device.time_calls(fn, repeats, False))


def speed_ratio(attempt: Callable[[], object], baseline: Callable[[], object], device: str,
                limit: float = float("inf"), rounds: int = 5) -> tuple[float, float, float]:
    """Attempt time / baseline time, measured in the same run, interleaved over a few rounds (best of each)."""
    from demos.harness import threads
    from demos.harness.device import resolve

    timer = resolve(device)
    # one thread each on a CPU (the harness's thread policy): a descheduled OpenMP thread stalls a parallel op
    # on a busy machine
    one_thread = threads.limit(1) if device == "cpu" else None
    try:
        ta, tb = float("inf"), float("inf")
        for _ in range(rounds):
            ta = min(ta, best_time(attempt, timer))
            tb = min(tb, best_time(baseline, timer))
            if ta / tb > 3 * limit:  # far over the limit: more rounds cannot change the verdict
                break
    finally:
        if one_thread is not None:
            one_thread.restore()
    return ta / tb, ta, tb


def speed_outputs(attempt: Callable[[], object], baseline: Callable[[], object], device: str,
                  limit: float) -> dict:
    """In the solution's process: the attempt's and the baseline's times (seconds), for ``speed_verdict``."""
    _, ta, tb = speed_ratio(attempt, baseline, device, limit)
    return {"attempt_s": ta, "baseline_s": tb}


def speed_verdict(times: dict, baseline_name: str, limit: float) -> tuple[bool, str]:
    """In the grading process: the ratio of the times the solution's process measured, against the limit."""
    ta, tb = float(times["attempt_s"]), float(times["baseline_s"])
    ratio = ta / tb
    verdict = "within" if ratio <= limit else "over"
    return ratio <= limit, (f"{ta * 1e3:.3g} ms vs {tb * 1e3:.3g} ms for {baseline_name}: {ratio:.2f}x, "
                            f"{verdict} the {limit:g}x limit")
