"""The API index's summary tables (_ext/book_api.py): their captions carry no citation, which LaTeX cannot
set inside a caption (the PDF build stopped on one), while the entries keep every source."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))

import book_api  # noqa: E402 - the extension lives outside the package, in _ext/

KEYS = {"jordan2024muon", "su2025orthogonal", "su2025"}


def test_a_parenthesis_of_keys_leaves_the_caption():
    text = "Muon: momentum, then msign (jordan2024muon, su2025orthogonal)."
    assert book_api._without_keys(text, KEYS) == "Muon: momentum, then msign."


def test_keys_as_literals_and_words_that_contain_a_key_are_handled():
    assert book_api._without_keys("Steps of ``su2025`` (``su2025``).", KEYS) == "Steps of."
    assert book_api._without_keys("su2025orthogonal_extra stays", KEYS) == "su2025orthogonal_extra stays"


def test_the_caption_of_every_summary_table_is_free_of_citations():
    lines = book_api.summary_rst(["svmuon.optim.muon", "svmuon.orthogonal.stiefel.options"], KEYS)
    captions = [line for line in lines if line.startswith(".. list-table::")]
    assert captions and not any(":cite:" in c for c in captions)
    assert any(":cite:" in line for line in lines if not line.startswith(".. list-table::"))
