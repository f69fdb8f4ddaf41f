"""Where the repository's recorded results live, found from a chapter's or a script's working directory."""

from __future__ import annotations

from pathlib import Path


def repo_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: the working directory) holding ``_toc.yml``.

    Chapters execute with their own folder as working directory, so this finds the book's root from any
    chapter. Raises ``FileNotFoundError`` when there is none (e.g. a notebook copied out of the book).
    """
    here = Path.cwd() if start is None else Path(start)
    for folder in (here, *here.resolve().parents):
        if (folder / "_toc.yml").is_file():
            return folder
    package_root = Path(__file__).resolve().parents[2]
    if (package_root / "_toc.yml").is_file():
        return package_root
    raise FileNotFoundError(f"no _toc.yml at or above {here}: run from inside the book's repository")


def results_dir(kind: str = "benchmarks") -> Path:
    """``<repo>/benchmarks/results`` (``kind="benchmarks"``) or ``<repo>/experiments/results``."""
    if kind not in ("benchmarks", "experiments"):
        raise ValueError(f"kind must be 'benchmarks' or 'experiments', got {kind!r}")
    return repo_root() / kind / "results"
