"""Every chapter in _toc.yml executes top to bottom as a notebook, in its own folder, without errors.

This is the same execution the book build does (jupytext → nbclient), run here so that `pytest` alone
catches a broken chapter. The wall time of each chapter is printed (budget: 60 s on 2 cores) but not
asserted: timings belong to benchmarks, not to tests.
"""

from __future__ import annotations

import time
from pathlib import Path

import jupytext
import nbclient
import pytest
import yaml
from traitlets.config import Config

ROOT = Path(__file__).resolve().parents[1]


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return files


def _chapter(stem: str) -> Path | None:
    for ext in (".md", ".ipynb"):
        path = ROOT / f"{stem}{ext}"
        if path.exists():
            return path
    return None


def _is_notebook(path: Path | None) -> bool:
    if path is None:
        return False  # reported by test_every_toc_entry_exists
    head = path.read_text().split("\n---", 1)[0]
    return path.suffix == ".ipynb" or "kernelspec" in head


CHAPTERS = [s for s in _toc_files() if _is_notebook(_chapter(s))]
# Kernels with CurveZMQ keys, as in the book build (_ext/book_pages.py): no "running over TCP without
# encryption" warning from ipykernel.
KERNEL_CONFIG = Config({"KernelManager": {"transport_encryption": "auto"}})


def test_every_toc_entry_exists():
    for stem in _toc_files():
        assert _chapter(stem) is not None, f"{stem} is listed in _toc.yml but has no .md/.ipynb file"


@pytest.mark.slow
@pytest.mark.parametrize("stem", CHAPTERS)
def test_chapter_executes(stem):
    path = _chapter(stem)
    nb = jupytext.read(path)
    t0 = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", config=KERNEL_CONFIG,
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    elapsed = time.perf_counter() - t0
    print(f"{stem}: executed in {elapsed:.1f} s")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    if "plt." in path.read_text():  # a chapter that draws must show its figures (e.g. no MPLBACKEND=Agg)
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{stem} drew no figure"
