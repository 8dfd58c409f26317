"""Hostile attempts at the exercise grader (issue 31, item 7): a solution that hangs, exits, imports or reads the
reference or patches the grader never gets a pass, never hangs the grader, and is told so in one line without a
traceback.

Each attempt is graded the way a user grades one, ``python -m exercises NAME --solution FILE``, in a process of
its own (a solution that calls os._exit must not take the test down with it)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from exercises._sandbox import available as landlock_available

REPO = Path(__file__).resolve().parents[1]
HANG_GUARD_S = 300  # a grader that hangs fails the test instead of hanging it

# each a whole layer_norm attempt; "{fn}" marks where a body runs inside the graded function
LOOP = "while True:\n    pass\n"
EXITS = {
    "sys.exit(0)": "import sys\nsys.exit(0)\n",
    "raise SystemExit(0)": "raise SystemExit(0)\n",
    "os._exit(0)": "import os\nos._exit(0)\n",
    "exit()": "exit()\n",
}


def in_function(body: str) -> str:
    indented = "".join(f"    {line}\n" for line in body.splitlines())
    return f"def layer_norm(x, weight, bias, eps=1e-5):\n{indented}"


def grade(tmp_path: Path, source: str, *args: str, name: str = "layer_norm") -> subprocess.CompletedProcess:
    attempt = tmp_path / "attempt.py"
    attempt.write_text(source, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "exercises", name, "--solution", str(attempt), "--device", "cpu",
                           "--seed", "0", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)


def assert_stopped(done: subprocess.CompletedProcess, *words: str) -> str:
    """Non-zero, nothing passed, no traceback, and stderr is the one line that says what happened."""
    everything = done.stdout + done.stderr
    assert done.returncode == 1, everything
    assert "Traceback" not in everything and "PASS" not in done.stdout, everything
    line = done.stderr.strip()
    assert line.startswith("stopped: ") and "\n" not in line, everything
    for word in words:
        assert word in line, line
    return line


def assert_failed(done: subprocess.CompletedProcess, *words: str) -> None:
    """Graded to the end, and failed: exit code 1, a FAIL row that says why, the FAILED summary, no traceback."""
    everything = done.stdout + done.stderr
    assert done.returncode == 1, everything
    assert "Traceback" not in everything and "ALL CHECKS PASSED" not in everything, everything
    assert "FAIL  " in done.stdout and ": FAILED" in done.stdout, everything
    for word in words:
        assert word in done.stdout, everything


@pytest.mark.parametrize("where", ["at import", "inside the function"])
def test_an_infinite_loop_is_stopped_at_the_time_limit_which_is_said(tmp_path, where):
    source = LOOP if where == "at import" else in_function(LOOP)
    assert_stopped(grade(tmp_path, source, "--time-limit", "5"),
                   "your solution ran longer than 5 s (the time limit)", "infinite loop")


@pytest.mark.parametrize("how", list(EXITS))
@pytest.mark.parametrize("where", ["at import", "inside the function"])
def test_a_solution_that_exits_is_never_a_pass_and_says_it_exited(tmp_path, how, where):
    source = EXITS[how] if where == "at import" else in_function(EXITS[how])
    line = assert_stopped(grade(tmp_path, source), "nothing was graded")
    assert ("SystemExit" in line) if how != "os._exit(0)" else ("ended (exit code 0)" in line), line


def test_the_reference_solution_cannot_be_imported(tmp_path):
    assert_failed(grade(tmp_path, "from exercises.layer_norm.solution import layer_norm\n"),
                  "load and run the solution: raised ImportError", "cannot be imported while a solution is graded")


REFERENCE = REPO / "exercises" / "layer_norm" / "solution.py"
BY_PATH = {  # the reference's code read without an import statement: each is refused at the open
    "spec_from_file_location": ("import importlib.util as u\n"
                                f"spec = u.spec_from_file_location('r', {str(REFERENCE)!r})\n"
                                "m = u.module_from_spec(spec)\nspec.loader.exec_module(m)\n"
                                "layer_norm = m.layer_norm\n"),
    "open and exec through a link": ("ns = {}\nexec(open(LINK).read(), ns)\nlayer_norm = ns['layer_norm']\n"),
    "runpy through a link": "import runpy\nlayer_norm = runpy.run_path(LINK)['layer_norm']\n",
    "os.open of the folder": ("import os\n"
                              f"fd = os.open({str(REFERENCE.parent)!r}, os.O_RDONLY)\n"
                              "ns = {}\nexec(open(os.open('solution.py', os.O_RDONLY, dir_fd=fd)).read(), ns)\n"
                              "layer_norm = ns['layer_norm']\n"),
}


@pytest.mark.parametrize("how", list(BY_PATH))
def test_the_reference_cannot_be_read_by_path_or_through_a_link(tmp_path, how):
    link = tmp_path / "copy.py"
    link.symlink_to(REFERENCE)  # a hard link is the same file to the grader (device and inode); not tried here,
    # since a hard link would outlive a killed test inside the repository's file system
    done = grade(tmp_path, BY_PATH[how].replace("LINK", repr(str(link))))
    assert_failed(done, "raised PermissionError", "cannot be opened while a solution is graded")
    assert "PASS" not in done.stdout


# what no audit hook stops: opens made in C, a changed os.stat, the hook's own state, another program, a path
# relative to a folder opened elsewhere; the kernel (Landlock) refuses them all
IN_C = {
    "ctypes open": ("import ctypes, os\nfd = ctypes.CDLL(None).open(REF.encode(), 0)\n"
                    "ns = {}\nexec(os.fdopen(fd).read(), ns)\nlayer_norm = ns['layer_norm']\n"),
    "torch.from_file": ("import os, torch\n"
                        "raw = torch.from_file(REF, False, os.stat(REF).st_size, dtype=torch.uint8)\n"
                        "ns = {}\nexec(bytes(raw.tolist()).decode(), ns)\nlayer_norm = ns['layer_norm']\n"),
    "cat in a subprocess": ("import subprocess\nns = {}\n"
                            "exec(subprocess.run(['cat', REF], capture_output=True, text=True).stdout, ns)\n"
                            "layer_norm = ns['layer_norm']\n"),
    "git show": ("import subprocess\nns = {}\nexec(subprocess.run(['git', '-C', REPO, 'show', "
                 "'HEAD:exercises/layer_norm/solution.py'], capture_output=True, text=True).stdout, ns)\n"
                 "layer_norm = ns['layer_norm']\n"),  # the reference is in git's objects too
    "dir_fd from the root": ("import os\nfd = os.open('/', os.O_RDONLY)\n"
                             "ns = {}\nexec(os.fdopen(os.open(REF[1:], os.O_RDONLY, dir_fd=fd)).read(), ns)\n"
                             "layer_norm = ns['layer_norm']\n"),
    "os.stat patched": ("import os\nreal = os.stat\ndef blind(*a, **k):\n    raise OSError('no')\n"
                        "os.stat = blind\ntry:\n    text = open(REF).read()\nfinally:\n    os.stat = real\n"
                        "ns = {}\nexec(text, ns)\nlayer_norm = ns['layer_norm']\n"),
}


@pytest.mark.skipif(not landlock_available(), reason="this kernel has no Landlock: only the audit hook guards the "
                                                     "reference, and a determined solution gets around it")
@pytest.mark.parametrize("how", list(IN_C))
def test_the_kernel_refuses_the_reference_to_code_no_audit_hook_sees(tmp_path, how):
    done = grade(tmp_path, IN_C[how].replace("REF", repr(str(REFERENCE))).replace("REPO", repr(str(REPO))))
    assert done.returncode == 1 and "ALL CHECKS PASSED" not in done.stdout, done.stdout + done.stderr
    assert "PASS" not in done.stdout and "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.mark.skipif(not landlock_available(), reason="this kernel has no Landlock (see above)")
@pytest.mark.parametrize("name", ["layer_norm", "ring_all_reduce"])
def test_every_thread_is_sealed_and_nothing_in_the_repository_can_be_written(tmp_path, name):
    """Landlock binds the thread that seals and what it starts, not threads already running (a BLAS pool started
    at import could read the reference through a signal handler); and a solution that could write in the
    repository could leave a forged .pyc of the grader for the next grading."""
    report, forged = tmp_path / "threads.txt", REPO / "exercises" / "forged-by-a-solution.txt"
    # a .pth or sitecustomize.py in the Python environment would run in every later grading
    environment_file = Path(sysconfig.get_paths()["purelib"]) / "forged_by_a_solution.pth"
    source = (f"import os\nunsealed = sum('NoNewPrivs:\\t0' in open(f'/proc/self/task/{{t}}/status').read()\n"
              f"               for t in os.listdir('/proc/self/task'))\n"
              f"open({str(report)!r}, 'a').write(f'{{unsealed}}\\n')\n"
              f"for path in ({str(forged)!r}, {str(environment_file)!r}):\n    try:\n"
              f"        open(path, 'w').write('x')\n    except OSError:\n        pass\n"
              f"def {name}(*args, **kwargs):\n    raise RuntimeError('no')\n")
    try:
        done = grade(tmp_path, source, name=name)
        assert done.returncode == 1 and "ALL CHECKS PASSED" not in done.stdout, done.stdout + done.stderr
        assert not forged.exists() and not environment_file.exists()
        counts = report.read_text().split()
        assert counts and set(counts) == {"0"}, counts  # every process that imported it: no unsealed thread
    finally:
        forged.unlink(missing_ok=True)
        environment_file.unlink(missing_ok=True)


def test_the_reference_itself_still_grades(tmp_path):
    done = subprocess.run([sys.executable, "-m", "exercises", "layer_norm", "--solution", str(REFERENCE), "--device",
                           "cpu", "--seed", "0"], cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0 and "ALL CHECKS PASSED" in done.stdout, done.stdout + done.stderr


def test_patching_the_grader_by_import_fails_to_import(tmp_path):
    source = ("import exercises._grading as grading\n"
              "grading.Grader.check = lambda self, name, passed, why: True\n" + in_function("return x, x, x"))
    assert_failed(grade(tmp_path, source), "raised ImportError")


def test_patching_the_grader_it_can_reach_changes_no_verdict(tmp_path):
    """In its own process the solution can still find the grader's classes (gc): patching them there, and
    printing PASS rows, changes nothing, because the verdicts are made by the process that never loaded it."""
    source = '''import gc
import types
import torch
for obj in gc.get_objects():
    if isinstance(obj, type) and obj.__name__ == "Grader":
        obj.check = lambda self, name, passed, why: True
        obj.failed = property(lambda self: [])
    if isinstance(obj, types.FunctionType) and obj.__module__ == "exercises._grading" and obj.__name__ == "close":
        obj.__code__ = (lambda *a, **k: (True, "patched")).__code__
print("  PASS  random 16x1000: max |error| 0")


def layer_norm(x, weight, bias, eps=1e-5):
    lead = x.shape[:-1]
    return torch.zeros_like(x), x.new_zeros(lead, dtype=torch.float32), x.new_ones(lead, dtype=torch.float32)
'''
    assert_failed(grade(tmp_path, source), "  |   PASS  random 16x1000: max |error| 0",  # its print, marked as its own
                  "  FAIL  random 16x1000: ", "  FAIL  3-D input 2x3x64")


def test_a_solution_that_prints_a_pass_and_exits_is_stopped(tmp_path):
    source = ('print("  PASS  random 16x1000: fine")\nprint("Summary (0.1 s): 11 passed, 0 failed, 0 skipped: '
              'ALL CHECKS PASSED")\nimport os\nos._exit(0)\n')
    done = grade(tmp_path, source)
    assert done.returncode == 1 and done.stderr.strip().startswith("stopped: "), done.stdout + done.stderr


def test_outputs_forged_as_a_pickle_are_refused_and_never_run(tmp_path):
    """The solution's process knows where its outputs go; a pickle that runs a command when loaded is refused
    (the grading process reads outputs with torch.load(weights_only=True)) and the command never runs."""
    marker = tmp_path / "ran"
    source = f'''import os, pickle, sys

class Payload:
    def __reduce__(self):
        return (os.system, ("touch {marker}",))

with open(os.path.join(sys.argv[1], "outputs.pt"), "wb") as f:
    pickle.dump({{"results": [Payload()]}}, f)
os._exit(0)
'''
    assert_stopped(grade(tmp_path, source), "cannot be read")
    assert not marker.exists()


def test_the_grading_process_never_imports_the_solution(tmp_path):
    from exercises import grader
    from exercises._grading import Grader

    attempt = tmp_path / "attempt.py"
    attempt.write_text((REPO / "exercises" / "layer_norm" / "solution.py").read_text(encoding="utf-8"))
    before = set(sys.modules)
    g = Grader(device="cpu", echo=False)
    grader("layer_norm").grade(attempt, g)
    assert g.rows and not g.failed, [(r.name, r.why) for r in g.failed]
    loaded = [m for m in set(sys.modules) - before if str(attempt) in str(getattr(sys.modules[m], "__file__", ""))]
    assert not loaded, loaded


@pytest.mark.parametrize("argv, words", [
    (["--seed", "-1"], "--seed -1: expected a whole number"),
    (["--seed", str(2**40)], "expected a whole number from 0"),
    (["--time-limit", "0"], "--time-limit 0: expected a finite number of seconds above 0"),
    (["--time-limit", "nan"], "expected a finite number of seconds above 0"),
    (["--time-limit", "inf"], "expected a finite number of seconds above 0"),
])
def test_a_bad_seed_or_time_limit_is_one_line(capsys, argv, words):
    from exercises.__main__ import main

    with pytest.raises(SystemExit) as e:
        main(["layer_norm", "--solution", str(REPO / "exercises" / "layer_norm" / "solution.py"), *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and words in err, err


# -- the distributed graders: the ranks run the solution, this process judges ----------------------------------

def test_ranks_that_patch_the_judging_they_can_reach_still_fail(tmp_path):
    """A ring all-reduce that sums nothing, and patches every close() and Grader it finds in its rank: the
    verdicts come from the process that never loaded it."""
    source = '''import gc
import types
for obj in gc.get_objects():
    if (isinstance(obj, types.FunctionType) and (obj.__module__ or "").startswith("exercises")
            and obj.__name__ in ("close", "judge")):
        obj.__code__ = (lambda *a, **k: (True, "patched")).__code__


def ring_all_reduce(tensor):
    return tensor
'''
    done = grade(tmp_path, source, name="ring_all_reduce")
    assert_failed(done, "FAIL  2 ranks: 1003 floats (not a multiple of the world size): rank 0: the summed tensor "
                        "differs from the reference")


def test_ranks_cannot_import_the_reference(tmp_path):
    done = grade(tmp_path, "from exercises.ring_all_reduce.solution import ring_all_reduce\n", name="ring_all_reduce")
    assert_failed(done, "load and run the solution: rank 0: raised ImportError")
    assert "PASS" not in done.stdout


@pytest.mark.skipif(not landlock_available(), reason="this kernel has no Landlock (see above)")
def test_ranks_cannot_read_the_reference_in_c_either(tmp_path):
    reference = REPO / "exercises" / "ring_all_reduce" / "solution.py"
    source = IN_C["ctypes open"].replace("REF", repr(str(reference))).replace("layer_norm", "ring_all_reduce")
    done = grade(tmp_path, source, name="ring_all_reduce")
    assert_failed(done, "load and run the solution: rank 0: raised")
    assert "PASS" not in done.stdout


@pytest.mark.parametrize("call", ["torch.distributed.distributed_c10d.all_reduce(t)",
                                  "torch.distributed.group.WORLD.allreduce([t]).wait()"])
def test_a_collective_by_another_name_is_still_a_collective(tmp_path, call):
    """The ban once replaced torch.distributed's names only: the same all-reduce through distributed_c10d, or
    the process group's own method, passed every check."""
    source = f"import torch.distributed\ndef ring_all_reduce(t):\n    {call}\n    return t\n"
    done = grade(tmp_path, source, name="ring_all_reduce")
    assert_failed(done, "only send/recv (no collective): rank 0: called dist.allreduce")


@pytest.mark.parametrize("source, says", [
    ("import sys\nsys.exit(0)\n", "SystemExit(0)"),
    ("def ring_all_reduce(tensor):\n    exit()\n", "SystemExit(None)"),
    # the other ranks would wait for it until the collectives' timeout, printing the store's C++ warnings
    ("import os\nos._exit(0)\n", "exit codes [0]"),
    ("import os\ndef ring_all_reduce(tensor):\n    os._exit(0)\n", "exit codes [0]"),
], ids=["sys.exit at import", "exit() inside", "os._exit at import", "os._exit inside"])
def test_ranks_that_exit_stop_the_grading_in_one_line(tmp_path, source, says):
    assert_stopped(grade(tmp_path, source, name="ring_all_reduce"),
                   "2 ranks: ranks [0, 1] stopped before the end", says)


@pytest.mark.parametrize("where", ["at import", "inside the function"])
def test_ranks_that_hang_are_stopped_at_the_time_limit(tmp_path, where):
    source = LOOP if where == "at import" else "def ring_all_reduce(tensor):\n" + "".join(
        f"    {line}\n" for line in LOOP.splitlines())
    assert_stopped(grade(tmp_path, source, "--time-limit", "20", name="ring_all_reduce"),
                   "your solution ran longer than 20 s (the time limit)")
