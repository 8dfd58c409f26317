"""The thin MkDocs hook: all the work is in scripts/render.py (plain Python, no MkDocs).

- on_files: draw every record's plots (SVG) and add them to the site as generated files.
- on_page_markdown: replace the {{ results }}, {{ metric }} and {{ claim }} markers of a page.
A malformed record or a bad marker stops the build with one line naming the file and the field.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # MkDocs loads hooks by path

from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File  # noqa: E402

from demos.harness.record import RecordError  # noqa: E402
from scripts import catalog, render  # noqa: E402
from scripts.markers import MarkerError  # noqa: E402


def on_files(files, config):
    try:
        for demo in catalog.discover():
            for path, svg in render.plot_files(demo, catalog.load_records(demo)):
                files.append(File.generated(config, path, content=svg))
    except (RecordError, ValueError) as e:
        raise PluginError(str(e)) from None
    return files


def on_page_markdown(markdown, page, config, files):
    try:
        return render.render_page(markdown, page.file.src_uri)
    except (RecordError, MarkerError, ValueError) as e:
        raise PluginError(str(e)) from None
