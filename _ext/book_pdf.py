"""What the PDF of the book (``jupyter-book build . --builder pdflatex``) needs beyond Jupyter Book's defaults.

* **Tables.** The chapters' tables are pandas outputs whose bundles hold ``text/html`` and ``text/plain``;
  the LaTeX builder would pick the plain text, which for a pandas ``Styler`` is only
  ``<pandas.io.formats.style.Styler at 0x...>``. For the LaTeX builder each bundle with an HTML table is
  replaced, before myst-nb selects a mime type, by a real docutils table (header rows, the index cells as
  stub columns, row and column spans, the Styler caption as its title), which LaTeX sets as a numbered
  table that wraps its cells to the text width.
* **Numbers as on the web.** sphinx-jupyterbook-latex numbers theorems and exercises by section (3.3.1) when
  the book has parts; the HTML numbers them by chapter (3.1), and so does the PDF here.
* **Part titles.** The table of contents names the parts "Part I — Singular-value entropy"; LaTeX numbers
  parts itself, so the PDF's part pages read "Part I" over "Singular-value entropy", not "Part I Part I — ...".
  The chapters of the part captioned "Appendix" (config ``book_pdf_appendix_caption``) are lettered A, B, ...
* **Proofs.** sphinx-proof sets a proof as a note box with an empty title bar; in the PDF it is the text of
  the proof, "Proof." in italics, ended by a square.
* **One bibliography.** Sphinx gathers the citations at the end of the LaTeX document, where they open a
  chapter "Bibliography" of their own; the appendix page that holds the bibliography on the web would be an
  empty chapter before it, so the PDF drops that page and keeps its labels on the bibliography.
* **The web's notebooks untouched.** The LaTeX build writes myst-nb's notebooks to its own folder.
* **The PDF in the HTML.** The HTML build copies a PDF built earlier (``_build/latex/book.pdf``) to the
  root of the site, where the first page links to it, so the site and its offline copy ship the PDF.
"""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.builders.latex.nodes import thebibliography
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)
PDF_NAME = "book.pdf"  # latex_documents targetname book.tex (_config.yml)
WIDE_TABLE_CHARS = 110  # a table's unwrapped width in characters beyond which it is set \small (the text
# block holds about 110 characters of 10 pt type)


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


def _cell_paragraph(text: str) -> nodes.paragraph:
    """A cell's text, with LaTeX line-break points after underscores and slashes (identifiers such as
    ``word_embeddings`` in a narrow column would otherwise run into the next one)."""
    para = nodes.paragraph()
    for piece in re.split(r"(?<=[_/])", text):
        if para.children:
            para += nodes.raw("", r"\allowbreak{}", format="latex")
        para += nodes.Text(piece)
    return para


def _natural_width(rows) -> int:
    """Characters in the widest cell of each column, summed: the table's width if nothing wrapped."""
    ncols, starts, _ = _layout(rows)
    widest = [0] * ncols
    for (_, cells), row_starts in zip(rows, starts):
        for (text, _, _, colspan), col in zip(cells, row_starts):
            if colspan == 1:
                widest[col] = max(widest[col], len(text))
    return sum(widest) + 2 * ncols


def html_table_node(html: str) -> nodes.table | None:
    """A docutils table for the first HTML table in ``html``; None where there is none (or no rows)."""
    parser = _TableParser()
    parser.feed(html)
    rows = [(section, cells) for section, cells in parser.rows if cells]
    if not rows:
        return None
    ncols, starts, taken = _layout(rows)
    wide = _natural_width(rows) > WIDE_TABLE_CHARS
    body_rows = [r for r, (section, _) in enumerate(rows) if section == "tbody"]
    stub = 0  # leading columns made of header cells in every body row: the index
    while stub < ncols - 1 and body_rows and all(taken.get((r, stub), False) for r in body_rows):
        stub += 1
    table = nodes.table(classes=["nb-output-table"] + (["nb-wide-table"] if wide else []))
    if parser.caption.strip():
        table += nodes.title(text=" ".join(parser.caption.split()))
    group = nodes.tgroup(cols=ncols)
    table += group
    for i in range(ncols):
        spec = nodes.colspec(colwidth=1)
        if i < stub:  # Sphinx's LaTeX writer reads the attribute's presence, not its value
            spec["stub"] = 1
        group += spec
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
            entry += _cell_paragraph(text)
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
            if table is None:
                continue
            if "nb-wide-table" in table["classes"]:  # set in a smaller size
                small = nodes.container(classes=["nb-wide-table"])
                small += [nodes.raw("", r"\begingroup\small", format="latex"), table,
                          nodes.raw("", r"\endgroup", format="latex")]
                table = small
            bundle.replace_self(table)


# --- numbering, part titles, proofs -----------------------------------------------------------------------

_APPENDIX = "\\appendix" + "".join(
    rf"\renewcommand{{\the{c}}}{{\thechapter.\arabic{{{c}}}}}" for c in ("table", "figure", "equation", "literalblock"))
_PART = re.compile(r"^Part [IVXLC]+\s*[—–-]\s*")


def _latex_builder_inited(app: Sphinx) -> None:
    """For the LaTeX build (after sphinx-jupyterbook-latex's and myst-nb's builder-inited):

    * theorem and exercise numbers (Sphinx's, assigned when the documents are read) by chapter, as in the
      HTML: depth 1, where sphinx-jupyterbook-latex set 2 for a book with parts;
    * myst-nb's notebooks and output images in ``_build/jupyter_execute_latex``: on a cache hit myst-nb writes
      the notebook without its outputs, and in ``_build/jupyter_execute`` that copy would replace the executed
      one that the HTML build offers for download.
    """
    if app.builder.name != "latex":
        return
    app.config.numfig_secnum_depth = 1
    config = getattr(app.env, "mystnb_config", None)
    if config is not None:
        folder = Path(app.outdir).parent / "jupyter_execute_latex"
        app.env.mystnb_config = config.copy(output_folder=str(folder.resolve()))


def _latex_counters_by_chapter(app: Sphinx, env) -> list[str]:
    """Equations, figures and tables are numbered by LaTeX itself; with parts on top, depth 2 resets them at
    each chapter (3.4), as in the HTML. Set after Sphinx's toctree collector numbered the documents' figures
    and theorems (env-get-updated, which every build emits, reading or not), before the LaTeX writer runs."""
    if app.builder.name == "latex":
        app.config.numfig_secnum_depth = 2
    return []


class PartTitlesAndProofs(SphinxPostTransform):
    """For LaTeX: part titles without their "Part I — " prefix; proofs as plain text with an end mark."""

    default_priority = 710  # after sphinx-jupyterbook-latex's LatexRootDocPostTransforms (700) made the parts
    builders = ("latex",)

    def run(self, **kwargs) -> None:
        for section in self.document.findall(nodes.section):
            title = section.children[0] if section.children else None
            if isinstance(title, nodes.title) and _PART.match(title.astext()) and section.get("docname"):
                title.children = [nodes.Text(_PART.sub("", title.astext()))]
            elif (isinstance(title, nodes.title) and section.get("docname")
                  and title.astext() == self.config.book_pdf_appendix_caption):
                # the appendix part's chapters are lettered A, B, ... as a book's appendices are, and so are
                # the numbers of their tables, figures, equations and code blocks (sphinx.sty writes them with
                # \arabic{chapter}, which would number Appendix A's tables 1.1, 1.2, ...)
                section.insert(1, nodes.raw("", _APPENDIX, format="latex"))
        for box in list(self.document.findall(nodes.admonition)):
            if "proof" not in box["classes"] or not box.children:
                continue
            first = box.children[0]
            if isinstance(first, nodes.paragraph) and first.children and isinstance(first[0], nodes.Text):
                text = str(first[0])
                if text.startswith("Proof. "):
                    first.replace(first[0], nodes.Text(text[len("Proof. "):]))
                    first.insert(0, nodes.emphasis(text="Proof."))
                    first.insert(1, nodes.Text(" "))
            end = nodes.raw("", "\\nobreak\\hfill\\ensuremath{\\square}", format="latex")
            last = box.children[-1]
            (last if isinstance(last, nodes.paragraph) else box).append(end)
            box.replace_self(box.children)


class OneBibliography(SphinxPostTransform):
    """For LaTeX: drop the web's bibliography page (config ``book_pdf_bibliography_doc``); its labels move to
    the bibliography that Sphinx gathered at the end of the document."""

    default_priority = 760  # after Sphinx's BibliographyTransform (750)
    builders = ("latex",)

    def run(self, **kwargs) -> None:
        docname = self.config.book_pdf_bibliography_doc
        bib = next(iter(self.document.findall(thebibliography)), None)
        for page in list(self.document.findall(addnodes.start_of_file)):
            if page.get("docname") != docname or bib is None:
                continue
            ids = [i for section in page.findall(nodes.section) for i in section["ids"]]
            labels = "".join(rf"\phantomsection\label{{\detokenize{{{docname}:{i}}}}}" for i in ids)
            bib.parent.insert(bib.parent.index(bib), nodes.raw("", labels, format="latex"))
            page.parent.remove(page)


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
    app.add_post_transform(PartTitlesAndProofs)
    app.add_post_transform(OneBibliography)
    app.add_config_value("book_pdf_bibliography_doc", "chapters/appendix/bibliography", "env")
    app.add_config_value("book_pdf_appendix_caption", "Appendix", "env")  # the part of _toc.yml lettered A, B, ...
    app.connect("builder-inited", _latex_builder_inited, priority=900)
    app.connect("env-get-updated", _latex_counters_by_chapter, priority=900)  # after the collectors (500)
    app.connect("build-finished", _ship_pdf)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
