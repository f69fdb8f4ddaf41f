"""The execution cache is keyed on the library and the recorded results too (_ext/book_cache.py).

A real jupyter-cache in a temporary folder holds an executed chapter; after an edit of ``lib/`` or of a
results file the chapter reads, the next build start must drop it from the cache and mark its page
outdated, and leave it alone when nothing it depends on changed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))

import book_cache  # noqa: E402 - the extension lives outside the package, in _ext/

CHAPTER = """---
kernelspec: {{name: python3, display_name: Python 3}}
---
```{{code-cell}} ipython3
{code}
```
"""


@pytest.fixture()
def book(tmp_path):
    """A book folder: lib/, recorded results, two chapters (one reads results), and an empty cache."""
    (tmp_path / "lib" / "svmuon").mkdir(parents=True)
    (tmp_path / "lib" / "svmuon" / "core.py").write_text("X = 1\n")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "run.json").write_text('{"t": 1.0}\n')
    (tmp_path / "reads.md").write_text(CHAPTER.format(code="from svmuon._paths import results_dir"))
    (tmp_path / "plain.md").write_text(CHAPTER.format(code="print(1)"))
    return tmp_path


def _app(root: Path):
    env = SimpleNamespace(mystnb_config=SimpleNamespace(execution_mode="cache",
                                                        execution_cache_path=str(root / "cache")),
                          path2doc=lambda uri: Path(uri).stem, found_docs={"reads", "plain"})
    return SimpleNamespace(srcdir=str(root), env=env)


def _execute(root: Path, stem: str, code: str) -> None:
    """Put an "executed" notebook of chapter ``stem`` in the cache, as myst-nb does after executing it."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}})
    cell = nbformat.v4.new_code_cell(code, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb.cells = [cell]
    get_cache(str(root / "cache")).cache_notebook_bundle(CacheBundleIn(nb, root / f"{stem}.md"),
                                                         check_validity=False)


def _build(root: Path) -> set[str]:
    """One build's start and end as the extension sees them: the pages it marks outdated."""
    app = _app(root)
    book_cache._drop_stale(app)
    outdated = set(book_cache._outdated(app, app.env, set(), set(), set()))
    for stem in outdated:  # the build executes the dropped chapters again
        _execute(root, stem, "from svmuon._paths import results_dir" if stem == "reads" else "print(1)")
    book_cache._record_inputs(app, None)
    return outdated


def _cached(root: Path) -> set[str]:
    from jupyter_cache import get_cache

    return {Path(r.uri).stem for r in get_cache(str(root / "cache")).list_cache_records()}


def test_a_rebuild_executes_exactly_the_chapters_whose_inputs_changed(book):
    _execute(book, "reads", "from svmuon._paths import results_dir")
    _execute(book, "plain", "print(1)")
    # cached by a build that recorded no inputs: both are of unknown provenance and run again
    assert _build(book) == {"reads", "plain"}
    assert _build(book) == set()  # nothing changed
    (book / "benchmarks" / "results" / "run.json").write_text('{"t": 2.0}\n')  # a new recording
    assert _build(book) == {"reads"}  # only the chapter that reads results
    (book / "lib" / "svmuon" / "core.py").write_text("X = 2\n")  # a library edit
    assert _build(book) == {"reads", "plain"}
    assert _cached(book) == {"reads", "plain"}
    (book / "lib" / "svmuon" / "__pycache__").mkdir()
    (book / "lib" / "svmuon" / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"\0")
    assert _build(book) == set()  # bytecode is not an input


def test_digest_covers_names_and_contents(book):
    before = book_cache.digest(book, book_cache.LIBRARY)
    (book / "lib" / "svmuon" / "core.py").rename(book / "lib" / "svmuon" / "other.py")
    assert book_cache.digest(book, book_cache.LIBRARY) != before  # same bytes, another file


def test_which_chapters_read_results():
    assert book_cache.reads_results('path = results_dir("experiments") / "x.json"')
    assert book_cache.reads_results("doc = svmuon.results.read('fixed-entropy-digits')")
    assert book_cache.reads_results("from svmuon import results, msign")
    assert not book_cache.reads_results("The results of this chapter are exact.")


def test_other_execution_modes_are_left_alone(book):
    app = _app(book)
    app.env.mystnb_config.execution_mode = "force"
    book_cache._drop_stale(app)
    book_cache._record_inputs(app, None)
    assert app._book_stale == set() and not (book / "cache" / book_cache.INPUTS_FILE).exists()
