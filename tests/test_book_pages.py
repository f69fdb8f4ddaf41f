"""The book's Sphinx extension (_ext/book_pages.py): API-page links and the kernel set-up."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))

import book_pages  # noqa: E402 - the extension lives outside the package, in _ext/

KEYS = {"su2025entropy", "jordan2024muon"}


def test_bib_keys_become_citations():
    assert book_pages.link_sources(["References: su2025entropy, jordan2024muon."], KEYS) == [
        "References: :cite:p:`su2025entropy`, :cite:p:`jordan2024muon`."]
    assert book_pages.link_sources(["see ``su2025entropy``"], KEYS) == ["see :cite:p:`su2025entropy`"]


def test_labels_become_numbered_links_without_double_parentheses():
    out = book_pages.link_sources(["Polar factor (eq-msign).", "By Newton-Schulz (eq-msign; 5 steps).",
                                   "the lemma ``thm-skew-msign`` and eq-renyi"], set())
    assert out == ["Polar factor :eq:`eq-msign`.", "By Newton-Schulz (eq. :eq:`eq-msign`; 5 steps).",
                   "the lemma :prf:ref:`thm-skew-msign` and :eq:`eq-renyi`"]


def test_literal_blocks_roles_and_lookalikes_are_left_alone():
    lines = ["Formula::", "", "    H = -sum p log p   (eq-shannon; su2025entropy)", "", "Back in prose.",
             "freq-hz, file su2025entropy.pdf, eq-msign.py, :func:`su2025entropy`"]
    assert book_pages.link_sources(lines, KEYS) == lines


def test_kernels_start_with_transport_encryption():
    from jupyter_client.manager import KernelManager

    book_pages.encrypt_kernels()
    assert KernelManager().transport_encryption == "auto"


# --- formulas as math on the API page (_ext/book_math.py) ---------------------------------------------

import book_math  # noqa: E402


def test_braced_scripts_become_math_and_unicode_becomes_tex():
    assert book_math.to_tex("O(n) = {W ∈ R^{n×n} : WᵀW = I}") == (
        r"O(n) = \{W \in  \mathbb{R}^{n\times n} : W^{\top}W = I\}")
    assert book_math.to_tex("(I + η²P)^{-1/2} = I - P + P/√(1+η²)") == (
        r"(I + \eta ^{2}P)^{-1/2} = I - P + P/\sqrt{1+\eta ^{2}}")
    assert book_math.to_tex("∇_Y tr(M^{1/2}) = [WᵀΦ]_sym") == (
        r"\nabla _Y \operatorname{tr}(M^{1/2}) = [W^{\top}\Phi ]_{\mathrm{sym}}")
    assert book_math.to_tex("C = G⊥ᵀG⊥") == r"C = G^{\perp\top}G^{\perp}"  # one superscript, not two


def test_math_roles_in_prose_and_literals_only():
    assert book_math.math_roles("a point of Δ^{k-1}; see ``W ∈ R^{m×n}``.") == (
        r"a point of :math:`\Delta ^{k-1}`; see :math:`W \in  \mathbb{R}^{m\times n}`.")
    # (e^{-t} - e^{-ta}): each script with its base; ta is a product in an exponent
    assert book_math.math_roles("(e^{-t} - e^{-ta})") == "(:math:`e^{-t}` - :math:`e^{-ta}`)"
    # a role directly after a letter is separated by an escaped space, which prints nothing
    assert book_math.math_roles("(log 2 - h)^{-1/2}") == r"(log 2 - h\ :math:`)^{-1/2}`"
    # no braced script: left alone, as are roles and literals without one
    for line in ["WᵀW = I and ‖G‖_*", "see :func:`x_{1}` and ``a_b``", "``x_{1`` unbalanced"]:
        assert book_math.math_roles(line) == line


# --- each output once in the downloads; the execution table in words ---------------------------------


def test_stream_merge_leaves_the_notebook_outputs_alone():
    # myst-nb's merge (nb_merge_streams) wrote the merged text into the first piece of the notebook's own
    # outputs, and the executed notebook kept the later pieces too: every later line printed twice
    from myst_nb.core import render
    from myst_nb.core.utils import coalesce_streams
    from nbformat import v4

    outputs = [v4.new_output("stream", name="stdout", text="q -> 0  : log(3)\n"),
               v4.new_output("stream", name="stdout", text="q -> oo : log(2)\n")]
    book_pages._patch_merge_streams()
    merged = render.coalesce_streams(outputs)
    assert [o["text"] for o in merged] == ["q -> 0  : log(3)\nq -> oo : log(2)\n"]  # the page: one box
    assert [o["text"] for o in outputs] == ["q -> 0  : log(3)\n", "q -> oo : log(2)\n"]  # the download: as run
    book_pages._patch_merge_streams()  # a second setup does not wrap twice
    assert render.coalesce_streams.__wrapped__ is coalesce_streams


def test_execution_table_says_succeeded_in_words():
    from myst_nb.ext import execution_tables

    book_pages._patch_execution_table()
    status = execution_tables._key2transform["succeeded"]
    assert (status(True), status(False)) == ("succeeded", "failed")
    assert all(ord(c) < 128 for c in status(True) + status(False))  # no emoji font needed


# --- downloads from a warm execution cache ----------------------------------------------------------------


def test_a_download_from_the_cache_has_the_cached_outputs(tmp_path):
    """myst-nb writes a cache hit's notebook without outputs; the download takes them from the cache."""
    import nbformat
    from jupyter_cache import get_cache

    executed = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "print(1)", execution_count=1, outputs=[nbformat.v4.new_output("stream", name="stdout", text="1\n")])])
    executed.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "chapter.ipynb"
    nbformat.write(executed, path)
    cache = tmp_path / "cache"
    get_cache(str(cache)).cache_notebook_file(str(path), check_validity=False)
    bare = nbformat.from_dict(executed)
    bare.cells[0].outputs, bare.cells[0].execution_count = [], None
    written = tmp_path / "written.ipynb"
    nbformat.write(bare, written)
    out = nbformat.reads(book_pages.with_outputs(written, str(cache)).decode(), as_version=4)
    assert out.cells[0].outputs[0]["text"] == "1\n"
    # a notebook with outputs, or no cache: the file as written
    assert book_pages.with_outputs(path, str(cache)) == path.read_bytes()
    assert book_pages.with_outputs(written, "") == written.read_bytes()
    other = tmp_path / "other.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(2)")]), other)
    assert book_pages.with_outputs(other, str(cache)) == other.read_bytes()  # no record matches
