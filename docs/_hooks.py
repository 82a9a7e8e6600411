"""MkDocs hooks: serve the benchmark charts that docs/benchmarks.md links from bench/results.

The page links them as ``../bench/results/NAME.png`` so that it also reads right on
GitHub; the site gets a copy of each chart under ``bench-results/`` and the links are
pointed there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

_CHARTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def on_files(files: Files, config: Any) -> Files:
    for chart in sorted(_CHARTS.glob("*.png")):
        files.append(File.generated(config, f"bench-results/{chart.name}", abs_src_path=str(chart)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return markdown.replace("](../bench/results/", "](bench-results/")
