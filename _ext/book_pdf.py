"""What the PDF of the book (``jupyter-book build . --builder pdflatex``) needs beyond Jupyter Book's defaults.

* **Tables.** The chapters' tables are pandas outputs whose bundles hold ``text/html`` and ``text/plain``;
  the LaTeX builder would pick the plain text, which for a pandas ``Styler`` is only
  ``<pandas.io.formats.style.Styler at 0x...>``. For the LaTeX builder each bundle with an HTML table is
  replaced, before myst-nb selects a mime type, by a real docutils table (header rows, the index cells as
  stub columns, row and column spans, the Styler caption as its title), which LaTeX sets as a numbered
  table that wraps its cells to the text width.
* **The PDF in the HTML.** The HTML build copies a PDF built earlier (``_build/latex/book.pdf``) to the
  root of the site, where the first page links to it, so the site and its offline copy ship the PDF.
"""

from __future__ import annotations

import shutil
from html.parser import HTMLParser
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)
PDF_NAME = "book.pdf"  # latex_documents targetname book.tex (_config.yml)


# --- HTML tables as docutils tables ---------------------------------------------------------------------


class _TableParser(HTMLParser):
    """The first <table> of an HTML fragment: its caption and rows of (text, is_header, rowspan, colspan),
    each row tagged with the section (thead or tbody) it belongs to."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.caption, self.rows, self.section = "", [], "tbody"
        self._depth, self._cell, self._in_caption, self._skip = 0, None, False, 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("style", "script"):
            self._skip += 1
        elif tag == "table":
            self._depth += 1
        elif self._depth != 1:
            return
        elif tag in ("thead", "tbody"):
            self.section = tag
        elif tag == "caption":
            self._in_caption = True
        elif tag == "tr":
            self.rows.append((self.section, []))
        elif tag in ("td", "th") and self.rows:
            span = lambda key: max(int(attrs.get(key) or 1), 1)
            self._cell = [[], tag == "th", span("rowspan"), span("colspan")]
        elif tag == "br" and self._cell is not None:
            self._cell[0].append(" ")

    def handle_endtag(self, tag):
        if tag in ("style", "script"):
            self._skip = max(self._skip - 1, 0)
        elif tag == "table":
            self._depth -= 1
        elif self._depth != 1:
            return
        elif tag == "caption":
            self._in_caption = False
        elif tag in ("td", "th") and self._cell is not None:
            text, header, rows, cols = self._cell
            self.rows[-1][1].append((" ".join("".join(text).split()), header, rows, cols))
            self._cell = None

    def handle_data(self, data):
        if self._skip or self._depth != 1:
            return
        if self._in_caption:
            self.caption += data
        elif self._cell is not None:
            self._cell[0].append(data)


def _layout(rows) -> tuple[int, list[list[int]], dict[tuple[int, int], bool]]:
    """HTML table layout: the number of columns, each cell's starting column, and which grid positions hold
    a header cell (spans included)."""
    taken: dict[tuple[int, int], bool] = {}
    starts = []
    for r, (_, cells) in enumerate(rows):
        col, row_starts = 0, []
        for _, header, rowspan, colspan in cells:
            while (r, col) in taken:
                col += 1
            row_starts.append(col)
            for i in range(rowspan):
                for j in range(colspan):
                    taken[(r + i, col + j)] = header
            col += colspan
        starts.append(row_starts)
    ncols = max((c for _, c in taken), default=-1) + 1
    return ncols, starts, taken


def html_table_node(html: str) -> nodes.table | None:
    """A docutils table for the first HTML table in ``html``; None where there is none (or no rows)."""
    parser = _TableParser()
    parser.feed(html)
    rows = [(section, cells) for section, cells in parser.rows if cells]
    if not rows:
        return None
    ncols, starts, taken = _layout(rows)
    body_rows = [r for r, (section, _) in enumerate(rows) if section == "tbody"]
    stub = 0  # leading columns made of header cells in every body row: the index
    while stub < ncols - 1 and body_rows and all(taken.get((r, stub), False) for r in body_rows):
        stub += 1
    table = nodes.table(classes=["nb-output-table"])
    if parser.caption.strip():
        table += nodes.title(text=" ".join(parser.caption.split()))
    group = nodes.tgroup(cols=ncols)
    table += group
    for i in range(ncols):
        group += nodes.colspec(colwidth=1, stub=int(i < stub))
    head, body = nodes.thead(), nodes.tbody()
    for r, (section, cells) in enumerate(rows):
        row = nodes.row()
        for (text, _, rowspan, colspan), col in zip(cells, starts[r]):
            entry = nodes.entry()
            entry["morerows"] = min(rowspan, len(rows) - r) - 1 if rowspan > 1 else 0
            if colspan > 1:
                entry["morecols"] = colspan - 1
            if not entry["morerows"]:
                del entry["morerows"]
            entry += nodes.paragraph(text=text)
            row += entry
        # pad a short row (docutils needs every grid position covered)
        for col in range(ncols):
            if (r, col) not in taken:
                taken[(r, col)] = False
                row += nodes.entry("", nodes.paragraph(text=""))
        (head if section == "thead" else body).append(row)
    if len(head) and len(body):
        group += head
    elif len(head):  # a header-only table: its rows become the body
        body.extend(head.children)
    group += body
    return table


class HtmlTablesForLatex(SphinxPostTransform):
    """For LaTeX, replace each notebook output bundle that holds an HTML table by that table."""

    default_priority = 3  # before myst-nb's SelectMimeType (4), which would pick text/plain
    builders = ("latex",)

    def run(self, **kwargs) -> None:
        bundles = [n for n in self.document.findall(nodes.container) if n.get("nb_element") == "mime_bundle"]
        for bundle in bundles:
            html = [c for c in bundle.children if c.get("mime_type") == "text/html"]
            if not html or "<table" not in html[0].astext():
                continue
            table = html_table_node(html[0].astext())
            if table is not None:
                bundle.replace_self(table)


# --- the PDF in the HTML build --------------------------------------------------------------------------


def _ship_pdf(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    pdf = Path(app.outdir).parent / "latex" / PDF_NAME
    if pdf.is_file():
        shutil.copyfile(pdf, Path(app.outdir) / PDF_NAME)
        LOGGER.info(f"book_pdf: copied {pdf} into the HTML output")


def setup(app: Sphinx) -> dict:
    app.add_post_transform(HtmlTablesForLatex)
    app.connect("build-finished", _ship_pdf)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
