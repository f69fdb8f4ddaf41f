"""Where the book's repository and its recorded results are, and where a run writes by default.

Reading and writing differ on purpose. A reader (a chapter, :func:`svmuon.results.read`) wants the recorded
results wherever it runs: the repository at or above the working directory, else the one this package was
installed from (an editable install or a source checkout). A writer (an experiment or a benchmark run
without ``--output``) must never write into an installed copy's recorded results from elsewhere: inside the
repository it writes to ``<repo>/<kind>/results``, anywhere else to ``<kind>/results`` under the working
directory (:func:`default_results_dir`).
"""

from __future__ import annotations

from pathlib import Path

KINDS = ("benchmarks", "experiments")


def _find_root(start: Path) -> Path | None:
    for folder in (start, *start.resolve().parents):
        if (folder / "_toc.yml").is_file():
            return folder
    return None


def repo_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: the working directory) holding ``_toc.yml``.

    Chapters execute with their own folder as working directory, so this finds the book's root from any
    chapter. Raises ``FileNotFoundError`` when there is none (e.g. a notebook copied out of the book).
    """
    here = Path.cwd() if start is None else Path(start)
    root = _find_root(here)
    if root is None:
        raise FileNotFoundError(f"no _toc.yml at or above {here}: run from inside the book's repository")
    return root


def recorded_root() -> Path:
    """The repository whose recorded results a reader sees: :func:`repo_root` of the working directory,
    else the repository holding this package's source (``lib/svmuon`` two levels below it).

    Raises ``FileNotFoundError`` when neither exists (a wheel installed away from any checkout).
    """
    root = _find_root(Path.cwd())
    if root is not None:
        return root
    package_root = Path(__file__).resolve().parents[2]
    if (package_root / "_toc.yml").is_file():
        return package_root
    raise FileNotFoundError(f"no _toc.yml at or above {Path.cwd()} nor at {package_root}: the recorded results "
                            "ship with the book's repository; run from inside a checkout of it")


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind must be 'benchmarks' or 'experiments', got {kind!r}")
    return kind


def results_dir(kind: str = "benchmarks") -> Path:
    """``<repo>/benchmarks/results`` (``kind="benchmarks"``) or ``<repo>/experiments/results`` of the
    repository at or above the working directory (:func:`repo_root`; ``FileNotFoundError`` outside it)."""
    return repo_root() / _check_kind(kind) / "results"


def default_results_dir(kind: str) -> Path:
    """Where a run writes without ``--output``: :func:`results_dir` inside the book's repository, else
    ``<kind>/results`` under the working directory (never an installed copy's recorded results)."""
    _check_kind(kind)
    root = _find_root(Path.cwd())
    return (root if root is not None else Path.cwd()) / kind / "results"
