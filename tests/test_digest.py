"""Freshness = the measuring code + the declared inputs + the protocol version, and nothing else.

The small trees below test the rule's parts; the tests on a copy of this repository prove both directions
on the real demos: a harness comment, a renamed harness helper or a moved harness module stales no record,
a changed input stales exactly its readers, and a protocol bump stales every record.
"""

from __future__ import annotations

import re
import shutil

import pytest

from records import catalog
from records.digest import code_lines, declared_inputs, local_sources, protocol_version, source_digest
from records.paths import REPO_ROOT


def _tree(root):
    files = {
        "demos/__init__.py": "",
        "demos/harness/__init__.py": "",
        "demos/harness/timing.py": "PROTOCOL_VERSION = 1\nX = 1\n",
        "demos/topic/__init__.py": "",
        "demos/topic/shared.py": "from .deeper import helper\n",
        "demos/topic/deeper.py": "def helper():\n    return 1\n",
        "demos/topic/other.py": "UNRELATED = 1\n",
        "demos/topic/demo.py": "import torch\nfrom demos.topic import shared\nfrom demos.harness.timing import X\n",
        "records/__init__.py": "",
        # the smallest valid datasheet: the entries and fields the code reads by name (records/datasheets.py)
        "records/datasheets.toml": "[cpu]\nlabel = 'CPU'\nmemory_gbps = 2000.0\ntflops = {}\nsource = 'a bound'\n"
                                   "[h100]\nlabel = 'H100'\nmemory_gbps = 3350.0\nmemory_gb = 80\nnvlink_gbps = 450.0\n"
                                   "tflops = { bfloat16 = 989.4 }\nsource = 'datasheet'\n"
                                   "[a100]\nlabel = 'A100'\nmemory_gbps = 2039.0\nmemory_gb = 80\nnvlink_gbps = 300.0\n"
                                   "tflops = { bfloat16 = 312.0 }\nsource = 'datasheet'\n",
        "docs/results/kernel/cpu.json": '{"demo": "kernel", "metrics": {"x": {"value": 1}}, "source_digest": "a"}',
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "demos/topic/demo.py"


def digest(demo, root, device_class="cpu"):
    return source_digest(demo, device_class, root).value


def test_sources_are_the_demo_and_its_local_imports_without_the_harness(tmp_path):
    demo = _tree(tmp_path)
    names = {p.relative_to(tmp_path).as_posix() for p in local_sources(demo, tmp_path)}
    assert names == {"demos/topic/demo.py", "demos/topic/shared.py", "demos/topic/deeper.py", "demos/__init__.py",
                     "demos/topic/__init__.py"}


def test_digest_changes_when_an_imported_module_changes(tmp_path):
    demo = _tree(tmp_path)
    before = digest(demo, tmp_path)
    (tmp_path / "demos/topic/deeper.py").write_text("def helper():\n    return 2\n")
    assert digest(demo, tmp_path) != before


def test_the_harness_is_left_out_and_its_protocol_version_counts(tmp_path):
    demo = _tree(tmp_path)
    before = digest(demo, tmp_path)
    (tmp_path / "demos/harness/timing.py").write_text("PROTOCOL_VERSION = 1\nX = 2\n")  # a harness change
    assert digest(demo, tmp_path) == before
    (tmp_path / "demos/harness/timing.py").write_text("PROTOCOL_VERSION = 2\nX = 2\n")  # a protocol bump
    assert protocol_version(tmp_path) == 2 and digest(demo, tmp_path) != before


def test_importing_infrastructure_from_elsewhere_is_not_a_change(tmp_path):
    """Moving a harness module means editing the import lines of demos: those lines are not measuring code."""
    demo = _tree(tmp_path)
    before = digest(demo, tmp_path)
    demo.write_text(demo.read_text().replace("from demos.harness.timing import X",
                                             "from records.timing import (\n    X,\n)"))
    assert digest(demo, tmp_path) == before
    assert code_lines("from demos.harness import run\nimport records.paths\nY = 1\n") == "Y = 1"


def test_digest_ignores_modules_the_demo_does_not_import(tmp_path):
    demo = _tree(tmp_path)
    before = digest(demo, tmp_path)
    (tmp_path / "demos/topic/other.py").write_text("UNRELATED = 2\n")
    assert digest(demo, tmp_path) == before


def test_prose_cells_and_comments_do_not_change_the_digest_but_code_does(tmp_path):
    demo = _tree(tmp_path)
    before = digest(demo, tmp_path)
    text = demo.read_text()
    demo.write_text("# %% [markdown]\n# # A reworded heading\n#\n# New prose.\n\n" + text + "\n# a comment\n")
    assert digest(demo, tmp_path) == before  # prose and comments: still fresh
    demo.write_text(text + "Y = 2\n")
    assert digest(demo, tmp_path) != before  # a statement: stale
    demo.write_text(text.replace("import torch", "import torch  # trailing comments are code lines"))
    assert digest(demo, tmp_path) != before


def test_a_module_run_in_a_child_process_by_name_is_a_source(tmp_path):
    """A demo that runs `python -m demos.topic.other` in a subprocess depends on that file too."""
    demo = _tree(tmp_path)
    demo.write_text(demo.read_text() + 'CHILD = [sys.executable, "-m", "demos.topic.other", "x"]\n')
    before = digest(demo, tmp_path)
    (tmp_path / "demos/topic/other.py").write_text("UNRELATED = 2\n")
    assert digest(demo, tmp_path) != before
    assert "demos/topic/other.py" in {p.relative_to(tmp_path).as_posix() for p in local_sources(demo, tmp_path)}


def test_declared_inputs_are_part_of_the_digest(tmp_path):
    demo = _tree(tmp_path)
    demo.write_text(demo.read_text() + "from records.inputs import declare\n"
                    'INPUTS = declare(records=["kernel/{device}"], datasheets=["{device}"], files=["data.csv"])\n')
    (tmp_path / "data.csv").write_text("1,2\n")
    before, on_h100 = digest(demo, tmp_path), source_digest(demo, "h100", tmp_path)
    assert set(on_h100.inputs) == {"record kernel/h100", "datasheet h100", "file data.csv"}
    assert on_h100.inputs["record kernel/h100"] == "missing"
    record = tmp_path / "docs/results/kernel/cpu.json"
    record.write_text(record.read_text().replace('"source_digest": "a"', '"source_digest": "b"'))
    assert digest(demo, tmp_path) == before  # the input's own digest migrated: nothing it measured changed
    record.write_text(record.read_text().replace('"value": 1', '"value": 2'))
    assert digest(demo, tmp_path) != before  # the input was re-measured
    before = digest(demo, tmp_path)
    (tmp_path / "data.csv").write_text("1,3\n")
    assert digest(demo, tmp_path) != before
    before = digest(demo, tmp_path, "h100")
    toml = tmp_path / "records/datasheets.toml"
    toml.write_text(toml.read_text().replace("3350.0", "3352.0"))
    assert digest(demo, tmp_path, "h100") != before


def test_a_declaration_must_be_literal(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("NAMES = ['a/cpu']\nINPUTS = declare(records=NAMES)\n")
    with pytest.raises(ValueError, match="literal"):
        declared_inputs(path)
    path.write_text("INPUTS = declare(records=['a/cpu', 'b/{device}'])\n")
    assert declared_inputs(path) == {"records": ["a/cpu", "b/{device}"]}


# -- both directions, on a copy of this repository --------------------------------------------------------

@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """The parts of the repository that digests read: demos, the core, the records, the fixtures."""
    root = tmp_path_factory.mktemp("repo")
    for part in ("demos", "records", "docs/results", "tests/fixtures"):
        shutil.copytree(REPO_ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def all_digests(root) -> dict[str, str]:
    demos = catalog.discover(root / "demos")
    return {name: source_digest(d.path, "cpu", root).value for name, d in demos.items()}


def test_a_harness_comment_rename_or_move_stales_nothing(repo):
    before = all_digests(repo)
    harness = repo / "demos" / "harness"
    timing = harness / "timing.py"
    timing.write_text('"""A reworded docstring."""\n# a new comment\n' + timing.read_text())
    run = harness / "run.py"  # rename a helper of the harness
    run.write_text(re.sub(r"\b_fresh_compile_caches\b", "_empty_compile_caches", run.read_text()))
    (harness / "threads.py").rename(harness / "thread_policy.py")  # move a module, and fix its importers
    for path in [*repo.joinpath("demos").rglob("*.py")]:
        text = path.read_text()
        moved = re.sub(r"\bdemos\.harness\.threads\b", "demos.harness.thread_policy", text)
        moved = re.sub(r"(from demos\.harness import [^\n]*)\bthreads\b", r"\1thread_policy as threads", moved)
        if moved != text:
            path.write_text(moved)
    assert all_digests(repo) == before


def test_a_changed_input_stales_its_readers_and_only_them(repo):
    before = all_digests(repo)
    path = repo / "docs/results/kernel_fusion/cpu.json"
    path.write_text(path.read_text().replace('"unit": "GB/s"', '"unit": "GB/s" ', 1))  # same JSON: no change
    assert all_digests(repo) == before
    path.write_text(re.sub(r'"value": ([0-9.]+)', lambda m: f'"value": {float(m.group(1)) * 1.5}', path.read_text(), 1))
    after = all_digests(repo)
    changed = {name for name in before if after[name] != before[name]}
    assert changed == {"machine_laws", "hardware_roofline", "regression_gate"}


def test_a_protocol_bump_stales_every_record(repo):
    before = all_digests(repo)
    timing = repo / "demos/harness/timing.py"
    version = protocol_version(repo)
    timing.write_text(timing.read_text().replace(f"PROTOCOL_VERSION = {version}", f"PROTOCOL_VERSION = {version + 1}"))
    after = all_digests(repo)
    assert all(after[name] != before[name] for name in before)


def test_regen_orders_readers_after_what_they_read_and_the_gate_last():
    demos = catalog.discover()
    order = [d.name for d in catalog.readers_last(list(demos.values()))]
    assert sorted(order) == sorted(demos) and order[-1] == "regression_gate"
    for name in order:
        for pattern in demos[name].reads().get("records", []):
            read = pattern.partition("/")[0]
            if read != "*":
                assert order.index(read) < order.index(name), (name, read)
    topics = [d.path.parent.name for d in demos.values()]  # discovery sorts topics by number: t2 before t10
    assert topics.index("t2_pipeline") < topics.index("t10_benchmarking") < topics.index("t11_gpu")
    # what a regeneration of kernel_fusion makes stale next: its readers, and the gate that reads everything
    assert catalog.readers_of(list(demos.values()), {"kernel_fusion"}) == {"machine_laws", "hardware_roofline",
                                                                         "regression_gate"}


def test_a_circle_of_readers_is_refused(tmp_path):
    for name, reads in (("a", "b/cpu"), ("b", "a/cpu")):
        path = tmp_path / "demos" / "t1_x" / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"INPUTS = declare(records=[{reads!r}])\n")
    demos = catalog.discover(tmp_path / "demos")
    with pytest.raises(ValueError, match="circle"):
        catalog.readers_last(list(demos.values()))
