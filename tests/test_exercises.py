"""The coding exercises (issue 23, section 1): every grader passes its reference solution, fails every
deliberately wrong solution and the untouched starter (a grader that cannot fail is caught), and the
command and the site pages are wired up."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exercises import EXERCISES, folder, grader, solutions
from exercises._grading import Grader, StopGrading

REPO = Path(__file__).resolve().parents[1]
LOCAL = [n for n in EXERCISES if not getattr(grader(n), "DISTRIBUTED", False)]
DISTRIBUTED = [n for n in EXERCISES if getattr(grader(n), "DISTRIBUTED", False)]


def grade(name: str, path: Path, fail_fast: bool = False) -> Grader:
    import torch

    # on a GPU machine the graders run there (conftest turns the Triton interpreter on only without one)
    g = Grader(device="cuda" if torch.cuda.is_available() else "cpu", echo=False, fail_fast=fail_fast)
    try:
        grader(name).grade(path, g)
    except StopGrading:
        pass
    return g


def test_at_least_eight_exercises_each_complete():
    assert len(EXERCISES) >= 8 and DISTRIBUTED
    for name in EXERCISES:
        mod = grader(name)
        assert mod.TITLE and mod.SUMMARY and (REPO / "docs" / "topics" / f"{mod.TOPIC}.md").exists(), name
        ref, wrong = solutions(name)
        assert ref.exists() and (folder(name) / "starter.py").exists(), name
        assert len(wrong) >= 3, f"{name}: at least three deliberately wrong solutions"
        assert "NotImplementedError" in (folder(name) / "starter.py").read_text()


@pytest.mark.parametrize("name", LOCAL)
def test_grader_passes_reference_and_fails_each_wrong_solution(name):
    ref, wrong = solutions(name)
    g = grade(name, ref)
    assert g.rows and not g.failed, f"the reference fails: {[(r.name, r.why) for r in g.failed]}"
    for path in [*wrong, folder(name) / "starter.py"]:
        g = grade(name, path, fail_fast=True)
        assert g.failed, f"{path.name} passes every check of {name}'s grader: the grader cannot catch it"


def test_distributed_graders_on_2_and_4_ranks():
    """One spawn of 4 gloo ranks grades every distributed solution: the references on 2 and 4 ranks, the
    wrong solutions and the starters on 4 (each wrong one fails there; 2 ranks would only add time)."""
    from exercises._dist import WORLDS, run_jobs

    jobs, expect = [], []
    for name in DISTRIBUTED:
        ref, wrong = solutions(name)
        jobs += [(name, ref, WORLDS)] + [(name, p, (4,)) for p in [*wrong, folder(name) / "starter.py"]]
        expect += [True] + [False] * (len(wrong) + 1)
    results = run_jobs(jobs)
    for (name, path, worlds), per_world, should_pass in zip(jobs, results, expect):
        assert set(per_world) == set(worlds)
        rows = [row for w in worlds for row in per_world[w]]
        failed = [(n, why) for n, ok, why in rows if not ok]
        if should_pass:
            assert rows and not failed, f"{name} reference fails: {failed}"
        else:
            assert failed, f"{Path(path).name} passes every check of {name}'s grader"


def test_command_lists_grades_and_refuses_in_one_line(capsys, tmp_path):
    from exercises.__main__ import main

    assert main([]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in EXERCISES)
    for argv in (["no_such_exercise"], ["layer_norm", "--solution", str(tmp_path / "missing.py")]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err
    assert main(["layer_norm", "--solution", str(folder("layer_norm") / "starter.py"), "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "not implemented yet" in out and "Summary" in out
    assert main(["layer_norm", "--solution", str(folder("layer_norm") / "solution.py"), "--device", "cpu"]) == 0
    assert "ALL CHECKS PASSED" in capsys.readouterr().out


def test_pages_show_the_tested_reference_and_link_both_ways():
    nav = (REPO / "mkdocs.yml").read_text()
    index = (REPO / "docs" / "exercises" / "index.md").read_text()
    assert "exercises/index.md" in nav and "exercises/index.md" in (REPO / "docs" / "index.md").read_text()
    for name in EXERCISES:
        page = REPO / "docs" / "exercises" / f"{name.replace('_', '-')}.md"
        text = page.read_text()
        assert f"exercises/{page.name}" in nav and page.name in index, name
        # the folded reference is the tested file itself, included at build time, never a copy
        assert re.search(r'\?\?\? success "Reference solution"\n\n    ```python\n    --8<-- "'
                         + name + r'/solution\.py"', text), name
        assert f"python -m exercises {name}" in text
        topic = grader(name).TOPIC
        assert f"../topics/{topic}.md" in text, f"{name} links its topic page"
        topic_text = (REPO / "docs" / "topics" / f"{topic}.md").read_text()
        assert f"../exercises/{page.name}" in topic_text, f"{topic}.md links back to {name}"


def test_a_wrong_variant_is_the_reference_with_its_edits_and_an_edit_that_no_longer_matches_is_refused(monkeypatch):
    import importlib

    import exercises

    ref, wrong = solutions("layer_norm")
    variant = exercises.wrong_variant("layer_norm", "eps_outside_sqrt")
    assert variant.startswith('"""Wrong on purpose:') and variant != ref.read_text()
    assert any(p.name == "wrong_eps_outside_sqrt.py" and p.read_text() == variant for p in wrong)
    module = importlib.import_module("exercises.layer_norm.wrong")
    monkeypatch.setitem(module.WRONG, "stale", ("an edit the solution no longer contains", [("no such line\n", "x\n")]))
    with pytest.raises(ValueError, match="matches solution.py 0 times"):
        exercises.wrong_variant("layer_norm", "stale")
