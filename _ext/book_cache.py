"""A rebuild shows what the library computes and what is recorded now.

myst-nb's execution cache (``_build/.jupyter_cache``, jupyter-cache) matches a chapter by the text of its
code cells only, and Sphinx re-reads a page only when its source changed: after an edit of ``lib/`` or a
newly recorded benchmark or experiment result, a rebuild would show the old outputs. This extension keys
each cached notebook on its **inputs** as well:

* the library: every file under ``lib/`` (``__pycache__`` aside);
* the recorded results (``benchmarks/results/``, ``experiments/results/``), for a chapter whose source
  reads them (it names ``results_dir`` or ``svmuon.results``).

At the start of a build, a cached notebook whose inputs changed since it was executed (or whose inputs
were never recorded) is removed from the cache and its page is marked outdated, so that it is executed
again; at the end, the inputs of every notebook executed in this build are recorded beside the cache
(``book-inputs.json``: the cache record's hash key -> the inputs' SHA-256).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)
INPUTS_FILE = "book-inputs.json"
LIBRARY = ("lib",)
RESULTS = ("benchmarks/results", "experiments/results")
_READS_RESULTS = re.compile(r"results_dir|svmuon\.results|from svmuon import [^\n]*\bresults\b")


def _files(root: Path, folders: tuple[str, ...]) -> list[Path]:
    out = []
    for folder in folders:
        base = root / folder
        if base.is_dir():
            out += [p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                    and p.suffix != ".pyc"]
    return sorted(out)


def digest(root: Path, folders: tuple[str, ...]) -> str:
    """SHA-256 over the relative path and the bytes of every file in ``folders`` under ``root``."""
    h = hashlib.sha256()
    for path in _files(root, folders):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def reads_results(source: str) -> bool:
    """Whether a chapter's source reads recorded results (so that they are one of its inputs)."""
    return _READS_RESULTS.search(source) is not None


def chapter_inputs(source_path: Path, root: Path, library: str, results: str) -> str:
    """The fingerprint of one chapter's inputs: the library, and the results if the chapter reads them."""
    text = source_path.read_text(encoding="utf8") if source_path.is_file() else ""
    return library + (":" + results if reads_results(text) else "")


def stale_records(cache, recorded: dict[str, str], inputs_of) -> list:
    """Cache records whose recorded inputs differ from ``inputs_of(uri)`` (None: not a chapter of ours)."""
    stale = []
    for record in cache.list_cache_records():
        now = inputs_of(record.uri)
        if now is not None and recorded.get(record.hashkey) != now:
            stale.append(record)
    return stale


def _cache(app: Sphinx):
    from jupyter_cache import get_cache

    path = app.env.mystnb_config.execution_cache_path
    return get_cache(path), Path(path) / INPUTS_FILE


def _load(path: Path) -> dict[str, str]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _inputs_of(app: Sphinx):
    root = Path(app.srcdir)
    library, results = digest(root, LIBRARY), digest(root, RESULTS)

    def inputs_of(uri: str) -> str | None:
        path = Path(uri)
        try:
            path.resolve().relative_to(root.resolve())
        except ValueError:
            return None
        return chapter_inputs(path, root, library, results)

    return inputs_of


def _drop_stale(app: Sphinx) -> None:
    app._book_stale, app._book_inputs_of = set(), None
    if app.env.mystnb_config.execution_mode != "cache":
        return
    cache, inputs_file = _cache(app)
    app._book_inputs_of = _inputs_of(app)
    recorded = _load(inputs_file)
    for record in stale_records(cache, recorded, app._book_inputs_of):
        docname = app.env.path2doc(record.uri)
        LOGGER.info(f"[book_cache] inputs changed since {record.uri} was executed: executing it again")
        cache.remove_cache(record.pk)
        # the notebook executed again has the same code cells, hence the same hash key: forget the old inputs
        recorded.pop(record.hashkey, None)
        if docname:
            app._book_stale.add(docname)
    if inputs_file.parent.is_dir():
        inputs_file.write_text(json.dumps(recorded, indent=1, sort_keys=True))


def _outdated(app: Sphinx, env, added, changed, removed) -> list[str]:
    return sorted(app._book_stale & set(env.found_docs))


def _record_inputs(app: Sphinx, exception) -> None:
    if app._book_inputs_of is None:
        return
    cache, inputs_file = _cache(app)
    recorded, records = _load(inputs_file), cache.list_cache_records()
    keys = {r.hashkey for r in records}
    recorded = {k: v for k, v in recorded.items() if k in keys}
    for record in records:
        now = app._book_inputs_of(record.uri)
        if record.hashkey not in recorded and now is not None:
            recorded[record.hashkey] = now  # executed in this build, on today's inputs
    inputs_file.write_text(json.dumps(recorded, indent=1, sort_keys=True))


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", _drop_stale, priority=900)  # after myst-nb sets the cache path (500)
    app.connect("env-get-outdated", _outdated)
    app.connect("build-finished", _record_inputs)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
