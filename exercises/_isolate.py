"""Run a solution in a process of its own: the grader chooses the inputs and judges, the solution only computes.

The grading process never imports the solution. ``run_solution`` writes the grader's jobs (inputs it drew
from a seed of its own) to a temporary folder it owns, starts ``python -m exercises._isolate FOLDER`` under
the time limit (``scripts.regen.run_with_deadline``: its own process group, killed whole at the deadline),
and reads back what the solution returned with ``torch.load(weights_only=True)`` (tensors and plain
containers only: loading runs no code of the solution's). Every PASS and FAIL is decided afterwards, in the
grading process, by comparing those outputs with the grader's own references; so patching the grader, or
printing rows, inside the solution's process changes nothing.

In the solution's process (``child``), before the solution is imported, ``seal`` makes everything under
exercises/ unimportable (the reference solutions and the grader: an ``import`` of them raises ImportError),
takes the repository off sys.path, and makes the reference unreadable. On Linux the kernel (Landlock,
``exercises/_sandbox.py``) refuses to read anything in the repository but the solution itself and the Python
environment, however asked (Python's open, ctypes, a C++ extension, a ``cat`` or ``git show`` the solution starts;
the reference is also in git's objects, in the built site and in the pages that include it), and to write anything
there (a forged .pyc of the grader would pass the next grading). Everywhere, an audit hook (PEP 578) refuses
Python's own opens of exercises/ with a line that says why; where Landlock is missing, as on macOS, it is the only
barrier, and a determined solution can get around it. A copy of the repository elsewhere on the disk is the
candidate's own. The inputs are fresh (``--seed``) and the verdict is never the child's.

A solution that exits (``sys.exit``, ``exit()``, ``os._exit``), crashes or runs past the time limit leaves
no complete outputs: ``run_solution`` raises SolutionStopped with one line saying what happened.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import warnings
from pathlib import Path

from exercises._grading import REPO_ROOT, SolutionRaised, SolutionStopped, describe, load_solution, where
from exercises._sandbox import seal_folders

STOPPED_NOTE = "stopped.txt"  # the child's one line when the solution ended it (SystemExit and the like)
OUTPUTS = "outputs.pt"


# -- in the grading process ----------------------------------------------------------------------------

def run_solution(exercise: str, path, g, jobs: list[dict]) -> list[dict]:
    """The solution's outputs for each job, in order, computed in a separate process by the exercise's
    ``outputs(mod, job, device)``: one dict per job, read with ``_grading.value``. Raises SolutionRaised when
    the solution could not even be imported, SolutionStopped when its process did not return every output."""
    import torch

    from scripts.regen import run_with_deadline  # the one owner of "a process group under a hard deadline"

    limit = float(g.time_limit_s)
    with tempfile.TemporaryDirectory(prefix="exercise-") as folder:
        folder = Path(folder)
        torch.save({"exercise": exercise, "solution": str(Path(path).resolve()), "jobs": jobs}, folder / "inputs.pt")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OPENBLAS_NUM_THREADS": "1",  # no thread before the seal
               "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        # what the solution prints, marked as its own: it can never pass for a row of the grader's
        echo = (lambda line, _seconds: print(f"  | {line}", flush=True)) if g.echo else None
        done = run_with_deadline([sys.executable, "-m", "exercises._isolate", str(folder), g.device],
                                 folder / "output.log", limit, env=env, cwd=folder, on_line=echo)
        if done.timed_out:
            raise SolutionStopped(f"your solution ran longer than {limit:g} s (the time limit); look for an infinite "
                                  "loop at import or in a function (a slow but correct solution: --time-limit SECONDS)")
        note = folder / STOPPED_NOTE
        if note.exists():
            raise SolutionStopped(one_line(note.read_text(encoding="utf-8", errors="replace")))
        if done.returncode != 0 or not (folder / OUTPUTS).exists():
            raise SolutionStopped(ended(done.returncode))
        try:
            with warnings.catch_warnings():  # a foreign file's format warnings are noise: it is refused anyway
                warnings.simplefilter("ignore")
                out = torch.load(folder / OUTPUTS, map_location=g.device, weights_only=True)
        except Exception:  # not what child() writes: the solution wrote it (only tensors and containers load)
            raise SolutionStopped("the outputs of your solution's process cannot be read: they are not what the "
                                  "grader's code there writes; nothing was graded") from None
    if isinstance(out, dict) and isinstance(out.get("import_error"), str):
        raise SolutionRaised(one_line(out["import_error"]))
    results = out.get("results") if isinstance(out, dict) else None
    if not isinstance(results, list) or len(results) != len(jobs) or not all(well_formed(r) for r in results):
        got = sum(well_formed(r) for r in results) if isinstance(results, list) else 0
        raise SolutionStopped(f"your solution's process returned {got} well-formed outputs of the {len(jobs)} "
                              "asked for; nothing was graded")
    return [{"raised": one_line(r["raised"])} if "raised" in r else r for r in results]


def well_formed(result) -> bool:
    return isinstance(result, dict) and (set(result) == {"value"} or
                                         (set(result) == {"raised"} and isinstance(result["raised"], str)))


def ended(returncode: int | None) -> str:
    """Why a process that left no outputs ended, in words."""
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"your solution's process was killed by {name} before it returned its outputs; nothing was graded"
    return (f"your solution's process ended (exit code {returncode}) before it returned its outputs (os._exit, or a "
            "crash): a solution returns its results and never ends the process; nothing was graded")


def one_line(text: str) -> str:
    """The first line of a text from the solution's process, printable characters only, at most 300 of them."""
    lines = text.strip().splitlines()
    return "".join(c for c in (lines[0] if lines else "") if c.isprintable())[:300]


# -- in the solution's process -------------------------------------------------------------------------

class RefuseExercises:
    """A meta-path finder: nothing under exercises/ is importable any more (see ``seal``)."""

    def find_spec(self, name, path=None, target=None):
        if name == "exercises" or name.startswith("exercises."):
            raise ImportError(f"{name!r} cannot be imported while a solution is graded: it runs on its own, "
                              "without the reference solutions or the grader")
        return None


def _identity(path) -> tuple[int, int] | None:
    """(device, inode) of what a path names, following links; None if it cannot be looked at."""
    try:
        info = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return info.st_dev, info.st_ino


def seal(solutions: list[str] = ()) -> None:
    """From here on, an import of anything under exercises/ raises ImportError: the modules already loaded leave
    sys.modules (the objects the caller holds keep working), a finder refuses the names, and the repository
    leaves sys.path; and nothing in the repository can be written, nor read but the ``solutions`` being graded and
    the Python environment (the kernel's refusal where Landlock is available), nor anything under exercises/ by
    Python's own opens (an audit hook, comparing device and inode, everywhere). Called once the process holds what
    it needs, before the solution is imported."""
    for name in [n for n in sys.modules if n == "exercises" or n.startswith("exercises.")]:
        del sys.modules[name]
    sys.meta_path.insert(0, RefuseExercises())
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != REPO_ROOT]
    folder = REPO_ROOT / "exercises"
    guarded = {_identity(p) for p in [folder, *folder.rglob("*")]} - {_identity(p) for p in solutions} - {None}

    def refuse_exercises(event: str, args: tuple) -> None:
        # "open": open(), os.open, io.open_code (every import from a file); a folder too (os.open(..., dir_fd=))
        if event == "open" and args and not isinstance(args[0], int) and _identity(args[0]) in guarded:
            raise PermissionError(f"{os.fsdecode(args[0])!r} cannot be opened while a solution is graded: it runs "
                                  "without the reference solutions and the grader")

    sys.addaudithook(refuse_exercises)
    # the Python environment the solution's imports load from, read only: a .pth or sitecustomize.py written
    # there would run in every later grading (the working folder, the child's own temp folder, stays writable)
    environment = [Path(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path}
                   if p and Path(p).is_dir() and Path(p).resolve() != Path.cwd().resolve()]
    seal_folders([REPO_ROOT, *environment], [*map(Path, solutions), *environment])


def portable(x):
    """What a solution returned, as plain tensors and containers that ``torch.load(weights_only=True)`` reads;
    any other object becomes the string "<its type>" (see ``_grading.kind``)."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().as_subclass(torch.Tensor)  # an nn.Parameter or a subclass travels as a plain tensor
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if isinstance(x, (list, tuple)):
        items = [portable(v) for v in x]
        return items if isinstance(x, list) else tuple(items)
    if isinstance(x, dict):
        return {str(k): portable(v) for k, v in x.items()}
    return f"<{type(x).__name__}>"


def stopped_by(exc: BaseException) -> str:
    """One line for an exception that is not an Exception (it would end the process), raised by the solution."""
    if isinstance(exc, SystemExit):
        return (f"your solution raised SystemExit({exc.code!r}){where(exc)} (sys.exit(), exit() or quit()): a solution "
                "returns its results and never ends the process; nothing was graded")
    return f"your solution raised {type(exc).__name__}{where(exc)}; nothing was graded"


def child(folder: str, device_kind: str) -> None:
    """Load the jobs, seal, import the solution, compute each job's outputs; save them, or say why not."""
    import torch

    from exercises import grader
    from records import atomic

    # what the timing needs later, while the repository can still be imported (speed_ratio imports lazily)
    from demos.harness import device, threads  # noqa: F401

    folder = Path(folder)
    warnings.simplefilter("ignore")  # overflow and deprecation warnings are noise in a grade
    task = torch.load(folder / "inputs.pt", map_location=device_kind, weights_only=True)
    outputs = grader(task["exercise"]).outputs
    seal([task["solution"]])

    def save(data) -> None:
        """Write the outputs and end here: a thread or an exit handler the solution left cannot undo or delay
        a grading that is complete."""
        atomic.write_bytes_via(folder / OUTPUTS, lambda tmp: torch.save(data, tmp))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    try:
        try:
            mod = load_solution(task["solution"])
        except Exception as e:  # the attempt cannot even be imported: one FAIL row in the grading process
            save({"import_error": describe(e)})
        results = []
        for job in task["jobs"]:
            try:
                results.append({"value": portable(outputs(mod, job, device_kind))})
            except Exception as e:  # the attempt's bug is the grade, never a crash
                results.append({"raised": describe(e)})
        save({"results": results})
    except BaseException as e:  # sys.exit(), exit(), KeyboardInterrupt from the solution: one line, no traceback
        (folder / STOPPED_NOTE).write_text(stopped_by(e), encoding="utf-8")
        os._exit(3)


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2])
