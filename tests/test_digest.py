"""The source digest follows imports of local modules, and only those."""

from __future__ import annotations

from demos.harness.digest import local_sources, source_digest


def _tree(root):
    files = {
        "demos/__init__.py": "",
        "demos/harness/__init__.py": "",
        "demos/harness/timing.py": "X = 1\n",
        "demos/topic/__init__.py": "",
        "demos/topic/shared.py": "from .deeper import helper\n",
        "demos/topic/deeper.py": "def helper():\n    return 1\n",
        "demos/topic/other.py": "UNRELATED = 1\n",
        "demos/topic/demo.py": "import torch\nfrom demos.topic import shared\nfrom demos.harness.timing import X\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "demos/topic/demo.py"


def test_sources_include_transitive_local_imports_only(tmp_path):
    demo = _tree(tmp_path)
    names = {p.relative_to(tmp_path).as_posix() for p in local_sources(demo, tmp_path)}
    assert names == {"demos/topic/demo.py", "demos/topic/shared.py", "demos/topic/deeper.py",
                     "demos/harness/timing.py", "demos/harness/__init__.py", "demos/__init__.py",
                     "demos/topic/__init__.py"}


def test_digest_changes_when_an_imported_module_changes(tmp_path):
    demo = _tree(tmp_path)
    before = source_digest(demo, tmp_path)
    (tmp_path / "demos/topic/deeper.py").write_text("def helper():\n    return 2\n")
    assert source_digest(demo, tmp_path) != before


def test_digest_changes_when_the_harness_changes(tmp_path):
    demo = _tree(tmp_path)
    before = source_digest(demo, tmp_path)
    (tmp_path / "demos/harness/timing.py").write_text("X = 2\n")
    assert source_digest(demo, tmp_path) != before


def test_digest_ignores_modules_the_demo_does_not_import(tmp_path):
    demo = _tree(tmp_path)
    before = source_digest(demo, tmp_path)
    (tmp_path / "demos/topic/other.py").write_text("UNRELATED = 2\n")
    assert source_digest(demo, tmp_path) == before


def test_prose_cells_and_comments_do_not_change_the_digest_but_code_does(tmp_path):
    demo = _tree(tmp_path)
    before = source_digest(demo, tmp_path)
    text = demo.read_text()
    demo.write_text("# %% [markdown]\n# # A reworded heading\n#\n# New prose.\n\n" + text + "\n# a comment\n")
    assert source_digest(demo, tmp_path) == before  # prose and comments: still fresh
    demo.write_text(text + "Y = 2\n")
    assert source_digest(demo, tmp_path) != before  # a statement: stale
    demo.write_text(text.replace("import torch", "import torch  # trailing comments are code lines"))
    assert source_digest(demo, tmp_path) != before


def test_a_module_run_in_a_child_process_by_name_is_a_source(tmp_path):
    """A demo that runs `python -m demos.topic.other` in a subprocess depends on that file too."""
    demo = _tree(tmp_path)
    demo.write_text(demo.read_text() + 'CHILD = [sys.executable, "-m", "demos.topic.other", "x"]\n')
    before = source_digest(demo, tmp_path)
    (tmp_path / "demos/topic/other.py").write_text("UNRELATED = 2\n")
    assert source_digest(demo, tmp_path) != before
    assert "demos/topic/other.py" in {p.relative_to(tmp_path).as_posix() for p in local_sources(demo, tmp_path)}
