"""Grade an exercise attempt: ``python -m exercises NAME [--solution PATH] [--device auto|cpu|cuda]``.

Without NAME: the list of exercises. Without --solution: your file exercises/<NAME>/attempt.py.
The attempt runs in a process of its own, on inputs drawn from a fresh seed (``--seed`` repeats one), under a
time limit (``--time-limit``); this process judges what it returns (see exercises/_isolate.py).
Exit code 0 when every check passes, 1 when one fails or the attempt stops before it is graded (one line,
``stopped: ...``: it exited, crashed or ran past the time limit), 2 for a usage error (one line).
"""

from __future__ import annotations

import math
import os
import secrets
import sys
import time
from pathlib import Path

from exercises import EXERCISES, folder, grader
from records.errors import OneLineParser, fail
from exercises._grading import TIME_LIMIT_S, Grader, SolutionStopped, describe, shown

MAX_SEED = 2**31 - 1


def listing() -> str:
    lines = ["Exercises (grade one with: python -m exercises NAME, or make exercise NAME=...):", ""]
    for name in EXERCISES:
        mod = grader(name)
        lines.append(f"  {name:<26} {mod.TITLE}  [topic: {mod.TOPIC}]")
    lines += ["", "Start: cp exercises/NAME/starter.py exercises/NAME/attempt.py, implement it, then grade it."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m exercises", description="Grade a coding exercise locally.")
    p.add_argument("name", nargs="?", help="the exercise (omit to list them)")
    p.add_argument("--solution", type=Path, help="the file to grade (default: exercises/NAME/attempt.py)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="where to run (auto: cuda when a GPU is present, else cpu)")
    p.add_argument("--seed", type=int, help=f"the seed of the inputs, 0 to {MAX_SEED} (default: a fresh one, printed)")
    p.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help=f"stop the attempt after this long (default: the exercise's, {TIME_LIMIT_S:g} s for most)")
    args = p.parse_args(argv)
    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        fail(f"--seed {args.seed}: expected a whole number from 0 to {MAX_SEED}")
    if args.time_limit is not None and not (math.isfinite(args.time_limit) and args.time_limit > 0):
        fail(f"--time-limit {args.time_limit:g}: expected a finite number of seconds above 0")
    if not args.name:
        print(listing())
        return 0
    if args.name not in EXERCISES:
        fail(f"no exercise named {args.name!r}; choose one of: {', '.join(EXERCISES)}")
    path = args.solution or folder(args.name) / "attempt.py"
    if not path.is_file():
        if args.solution:
            fail(f"no file {shown(path)}")
        fail(f"no attempt yet at {shown(path)}: cp {shown(folder(args.name) / 'starter.py')} {shown(path)}, "
             "implement it, and run this again (or grade another file with --solution PATH)")
    from demos.harness.device import resolve  # the harness's resolver: auto is cuda when a GPU is visible

    device = resolve(args.device).kind
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read when Triton is first imported
    mod = grader(args.name)
    seed = secrets.randbelow(MAX_SEED + 1) if args.seed is None else args.seed
    print(f"Grading {args.name} ({mod.TITLE}): {shown(path)} on {device}, inputs from --seed {seed}", flush=True)
    g = Grader(device=device, seed=seed, time_limit_s=args.time_limit or getattr(mod, "TIME_LIMIT_S", TIME_LIMIT_S))
    t0 = time.perf_counter()
    try:
        mod.grade(path, g)
    except SolutionStopped as e:  # no complete outputs: nothing to judge, and never a pass
        print(f"stopped: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # the attempt could not even be imported, or the grader hit something unexpected
        g.check("load and run the solution", False, describe(e))
    print(f"Summary ({time.perf_counter() - t0:.1f} s): {g.summary()}")
    return 1 if g.failed or not g.rows else 0


if __name__ == "__main__":
    sys.exit(main())
