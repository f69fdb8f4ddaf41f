"""What every page of the book gets beyond Jupyter Book's defaults.

* **An executed notebook to download.** myst-nb writes each executed chapter to
  ``_build/jupyter_execute/<docname>.ipynb``; this copies it next to the page's sources
  (``_build/html/_sources/<docname>.ipynb``) and gives the theme's download menu an ``.ipynb`` entry, so
  every chapter downloads with its outputs, as built by the README's build command, also when the page
  came from the execution cache (:func:`with_outputs`).
* **Scripts once.** sphinx-thebe registers its inline configuration script twice, and the second
  ``const THEBE_JS_URL`` is a console error on every page; duplicates are dropped from each page.
* **Encrypted kernels.** ipykernel warns on stderr ("Kernel is running over TCP without encryption") for
  every executed chapter; the kernels are started with CurveZMQ keys instead (jupyter_client's
  ``transport_encryption="auto"``; the python3 kernelspec declares support), which removes the cause.
* **Each output once in the downloads.** myst-nb's ``nb_merge_streams`` (myst_nb.core.utils.coalesce_streams)
  merges a cell's stdout pieces into its first piece *in place*, and the notebook it then writes to
  ``jupyter_execute/`` keeps the later pieces too: the download printed every later piece twice. The merge
  is given copies (:func:`merge_streams_on_copies`), so the page shows one merged box and the executed
  notebook keeps the kernel's outputs as they came.
* **Execution status in words.** myst-nb's execution table marks a chapter with the emoji ✅ or ❌, which
  a reader without an emoji font sees as an empty box; the table says "succeeded" or "failed".
* **Readable API page.** Docstrings name their sources by ``references.bib`` key and the book's equations
  and theorems by label (``eq-msign``, ``thm-skew-msign``), so that they read in ``help()``. On the API page
  those become citations and numbered links (``:cite:p:``, ``:eq:``, ``:prf:ref:``); a label that the book
  does not define then fails the ``-n`` build instead of showing a bare name. Formulas with TeX-like
  scripts (``R^{m×n}``, ``Δ^{n-1}``) are typeset as math (``_ext/book_math.py``).
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path

from sphinx.application import Sphinx

from book_math import math_roles  # noqa: E402 - a sibling module of _ext/

_LABEL = re.compile(r"``(?P<lit>(?:eq|thm|lem|def|cor|prop)-[A-Za-z0-9-]+)``|(?<![\w`:-])(?P<bare>(?:eq|thm|lem|def|cor|prop)-[a-z0-9]+(?:-[a-z0-9]+)*)(?![\w`-]|\.\w)")


# --- executed notebooks -------------------------------------------------------------------------------


def _executed_notebook(app: Sphinx, docname: str) -> Path | None:
    path = Path(app.outdir).parent / "jupyter_execute" / f"{docname}.ipynb"
    return path if path.is_file() else None


def with_outputs(source: Path, cache_path: str) -> bytes:
    """The executed notebook's bytes, its outputs taken from the execution cache where it has none.

    On a cache hit myst-nb renders the page from the cached outputs but writes the notebook *as read* to
    ``jupyter_execute/`` (it merges the outputs into a copy), so a rebuild with a warm cache shipped
    downloads without a single output."""
    import nbformat

    nb = nbformat.read(source, as_version=4)
    if not cache_path or any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
        return source.read_bytes()
    try:
        from jupyter_cache import get_cache

        _, nb = get_cache(cache_path).merge_match_into_notebook(nb)
    except KeyError:  # no cache record matches (a notebook that was not executed): as written
        return source.read_bytes()
    return nbformat.writes(nb).encode("utf-8")


def _add_ipynb_download(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Copy the executed notebook beside the page sources and point the theme's download menu at it."""
    if app.builder.format != "html" or doctree is None:
        return
    source = _executed_notebook(app, pagename)
    if source is None:
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(with_outputs(source, getattr(app.env.mystnb_config, "execution_cache_path", "")))
    context["ipynb_source"] = f"{pagename}.ipynb"  # read by sphinx-book-theme's add_header_buttons


# --- each output once -------------------------------------------------------------------------------


def merge_streams_on_copies(coalesce):
    """``coalesce`` (a stream-merging function) applied to copies of the outputs, never to the outputs."""
    if getattr(coalesce, "_book_copies", False):
        return coalesce

    @functools.wraps(coalesce)
    def merge(outputs):
        return coalesce(copy.deepcopy(outputs))

    merge._book_copies = True
    return merge


def _patch_merge_streams() -> None:
    from myst_nb.core import render

    render.coalesce_streams = merge_streams_on_copies(render.coalesce_streams)


# --- execution status ----------------------------------------------------------------------------------


def status_word(succeeded) -> str:
    """The execution table's status cell: a word in the book's font, not an emoji."""
    return "succeeded" if succeeded is True else "failed"


def _patch_execution_table() -> None:
    from myst_nb.ext import execution_tables

    execution_tables._key2transform["succeeded"] = status_word


# --- scripts once --------------------------------------------------------------------------------------


def _dedupe_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    scripts, seen = context.get("script_files"), set()
    if not scripts:
        return
    unique = []
    for js in scripts:
        # the same file or inline body (an inline script is registered with filename None or "")
        key = (getattr(js, "filename", str(js)) or "", tuple(sorted((k, str(v)) for k, v in getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    context["script_files"] = unique


# --- kernels -------------------------------------------------------------------------------------------


def encrypt_kernels() -> None:
    """Start Jupyter kernels with CurveZMQ transport encryption where the kernelspec supports it.

    Notebook execution (myst-nb through jupyter-cache, and nbclient in the tests) creates its own
    ``KernelManager`` with no configuration to pass, so the trait's default is changed for this process.
    """
    from jupyter_client.manager import KernelManager

    KernelManager.transport_encryption.default_value = "auto"


# --- API page ------------------------------------------------------------------------------------------


def _bib_keys(app: Sphinx) -> set[str]:
    keys: set[str] = set()
    for bib in app.config.bibtex_bibfiles:
        text = (Path(app.srcdir) / bib).read_text(encoding="utf8")
        keys |= set(re.findall(r"@\w+\s*\{\s*([^,\s]+)\s*,", text))
    return keys


def link_sources(lines: list[str], bib_keys: set[str]) -> list[str]:
    """Docstring lines with bib keys as ``:cite:p:`` and equation/theorem labels as ``:eq:``/``:prf:ref:``.

    Literal blocks (the indented lines after a line ending in ``::``) and inline roles are left alone.
    """
    keys = re.compile(r"``(?P<lit>" + "|".join(map(re.escape, sorted(bib_keys, key=len, reverse=True))) + r")``"
                      r"|(?<![\w`:/.-])(?P<bare>" + "|".join(map(re.escape, sorted(bib_keys, key=len, reverse=True)))
                      + r")(?![\w`-]|\.\w)") if bib_keys else None
    out, literal_indent = [], None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if literal_indent is not None:
            if line.strip() == "" or indent > literal_indent:
                out.append(line)
                continue
            literal_indent = None
        if line.rstrip().endswith("::"):
            literal_indent = indent
        line = math_roles(line)
        if keys is not None:
            line = keys.sub(lambda m: f":cite:p:`{m['lit'] or m['bare']}`", line)

        def label(m: re.Match) -> str:
            name = m["lit"] or m["bare"]
            return f":eq:`{name}`" if name.startswith("eq-") else f":prf:ref:`{name}`"

        line = _LABEL.sub(label, line)
        # ":eq:" prints "(6.2)": "(eq-x)" becomes "(6.2)", and "(eq-x; more)" becomes "(eq. (6.2); more)"
        line = re.sub(r"\((:eq:`[^`]+`)\)", r"\1", line)
        line = re.sub(r"\((:eq:`[^`]+`)(?=[;,])", r"(eq. \1", line)
        out.append(line)
    return out


def _read_bib_keys(app: Sphinx) -> None:
    # on the app, read at every build: the pickled environment would keep the keys of an older references.bib
    app._book_bib_keys = _bib_keys(app)


def _process_docstring(app: Sphinx, what, name, obj, options, lines: list[str]) -> None:
    lines[:] = link_sources(lines, app._book_bib_keys)


def setup(app: Sphinx) -> dict:
    encrypt_kernels()
    _patch_merge_streams()
    _patch_execution_table()
    app.connect("html-page-context", _add_ipynb_download, priority=500)  # before the theme's buttons (501)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    app.connect("builder-inited", _read_bib_keys)
    app.connect("autodoc-process-docstring", _process_docstring)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
