"""_ext/book_pdf.py: notebook HTML tables (pandas) become docutils tables for the PDF, cell by cell."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from docutils import nodes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_ext"))
from book_pdf import html_table_node  # noqa: E402


def _grid(table: nodes.table) -> list[list[str]]:
    return [[e.astext() for e in row.findall(nodes.entry)] for row in table.findall(nodes.row)]


def test_dataframe_with_a_multiindex_keeps_cells_spans_and_stubs():
    df = pd.DataFrame({"a": [1.5, 2.5, 3.5], "b c": ["x", "y", "z"]},
                      index=pd.MultiIndex.from_tuples([("p", 1), ("p", 2), ("q", 1)], names=["task", "n"]))
    table = html_table_node(df.to_html())
    (group,) = table.findall(nodes.tgroup)
    specs = list(group.findall(nodes.colspec))
    assert group["cols"] == 4 and [("stub" in s) for s in specs] == [True, True, False, False]
    head, body = list(group.findall(nodes.thead)), list(group.findall(nodes.tbody))
    assert len(head) == 1 and len(body) == 1
    rows = [[e.astext() for e in r.findall(nodes.entry)] for r in body[0].findall(nodes.row)]
    assert rows == [["p", "1", "1.5", "x"], ["2", "2.5", "y"], ["q", "1", "3.5", "z"]]  # "p" spans two rows
    first = next(body[0].findall(nodes.entry))
    assert first["morerows"] == 1
    assert ["", "a", "b c"] == [e.astext() for e in next(head[0].findall(nodes.row)).findall(nodes.entry)][1:]


def test_styler_caption_becomes_the_title_and_styles_are_dropped():
    html = pd.DataFrame({"x": [1.0]}).style.format("{:.2f}").set_caption("A caption").to_html()
    table = html_table_node(html)
    assert table.next_node(nodes.title).astext() == "A caption"
    assert "{" not in table.astext() and "1.00" in table.astext()  # no CSS text in the cells


def test_identifiers_may_break_and_wide_tables_are_marked():
    df = pd.DataFrame({f"column_{i}_with_a_long_name": [123456.789] for i in range(6)})
    table = html_table_node(df.to_html())
    assert "nb-wide-table" in table["classes"]  # > 110 characters unwrapped
    raws = [r.astext() for r in table.findall(nodes.raw)]
    assert raws and set(raws) == {r"\allowbreak{}"}
    assert "nb-wide-table" not in html_table_node(pd.DataFrame({"a": [1]}).to_html())["classes"]


def test_no_table_no_node():
    assert html_table_node("<p>no table here</p>") is None
