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
