"""The PDF of the whole book (README ``ci:pdf``), checked once it is built.

Reads ``book.pdf`` and its LaTeX ``book.log``, ``book.toc`` and ``book.aux`` in ``BOOK_LATEX`` (default
``_build/latex``) with poppler's ``pdfinfo``, ``pdftotext``, ``pdfimages`` and ``pdftoppm``. Without a PDF the
tests skip, unless ``BOOK_PDF_REQUIRED=1`` (CI). A few pages (the contents, a theorem with its proof, exercises
with solutions, a table, a figure, the bibliography with its Chinese titles) are rendered to PNG in
``BOOK_PDF_PAGES`` (default ``_build/pdf-pages``) for a human to look at.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
LATEX = Path(os.environ.get("BOOK_LATEX", ROOT / "_build" / "latex"))
PDF = LATEX / "book.pdf"
PAGES = Path(os.environ.get("BOOK_PDF_PAGES", ROOT / "_build" / "pdf-pages"))
TOOLS = ("pdfinfo", "pdftotext", "pdfimages", "pdftoppm")
# An overfull line up to this width stays inside the margin (2 cm either side of the text block): the log
# reports each; wider ones would be cut at the paper's edge or collide with the page number.
OVERFULL_PT = 15.0

pytestmark = pytest.mark.slow  # needs the built PDF (CI builds it before the slow tests); ~10 s


def _need_pdf() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if PDF.is_file() and not missing:
        return
    reason = f"no PDF at {PDF}" if not PDF.is_file() else f"poppler-utils missing: {missing}"
    if os.environ.get("BOOK_PDF_REQUIRED") == "1":
        pytest.fail(reason + " (README: the ci:pdf command)")
    pytest.skip(reason)


def _run(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


@functools.cache
def _pages() -> tuple[str, ...]:
    return tuple(_run("pdftotext", "-layout", str(PDF), "-").split("\f"))


@functools.cache
def _log() -> str:
    return (LATEX / "book.log").read_text(encoding="utf-8", errors="replace")


def _toc_files() -> list[tuple[str, str]]:
    """(part caption, chapter file) for every chapter of _toc.yml, in order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [(part["caption"], c["file"]) for part in toc["parts"] for c in part["chapters"]]


def _title(stem: str) -> str:
    text = (ROOT / f"{stem}.md").read_text()
    return re.search(r"^# (.+)$", text, re.M).group(1).strip()


def _latex_text(s: str) -> str:
    """A title as LaTeX writes it in book.toc, back to text (Sphinx's hyphen and spacing macros)."""
    s = s.replace(r"\sphinxhyphen {}", "-").replace(r"\sphinxhyphen{}", "-")
    return re.sub(r"\\hspace \{[^}]*\}", " ", s)


def test_every_chapter_of_the_table_of_contents_is_in_the_pdf():
    _need_pdf()
    toc = (LATEX / "book.toc").read_text(encoding="utf-8")
    found = re.findall(r"\\contentsline \{chapter\}\{\\numberline \{(\d+|[A-Z])\}(.+?)\}\{\d+\}", toc)
    chapters = [_latex_text(t) for _, t in found]
    parts = [_latex_text(t) for t in re.findall(r"\\contentsline \{part\}\{(.+?)\}\{\d+\}", toc)]
    files = _toc_files()
    bibliography = "chapters/appendix/bibliography"  # in the PDF: the unnumbered chapter at the end
    expected = [_title(f) for _, f in files if f != bibliography]
    assert chapters == expected
    # numbered 1, 2, ... through Part III, then the appendix's chapters lettered A, B, ... (_ext/book_pdf.py)
    numbered = [f for c, f in files if f != bibliography and c != "Appendix"]
    letters = [chr(ord("A") + i) for i in range(len(found) - len(numbered))]
    assert [k for k, _ in found] == [str(i) for i in range(1, len(numbered) + 1)] + letters
    assert re.search(r"\\contentsline \{chapter\}\{Bibliography\}", toc)
    captions = list(dict.fromkeys(c for c, _ in files))
    assert [re.sub(r"^[IVX]+ ", "", p) for p in parts] == [re.sub(r"^Part [IVX]+ — ", "", c) for c in captions]
    pages = int(re.search(r"^Pages:\s+(\d+)", _run("pdfinfo", str(PDF)), re.M).group(1))
    assert pages > 100 and len(_pages()) >= pages


def test_every_reference_and_citation_resolves():
    _need_pdf()
    log = _log()
    assert not re.findall(r"(Reference|Citation|Hyper reference) `[^']*' on page \d+ undefined", log)
    assert "There were undefined references" not in log and "Label(s) may have changed" not in log
    unresolved = [i + 1 for i, page in enumerate(_pages()) if "??" in page]
    assert not unresolved, f"'??' on PDF pages {unresolved}"


def _source_labels(directive: str) -> list[tuple[str, str]]:
    """(docname, label) of every ``:::{directive}`` with a ``:label:`` in the chapters of _toc.yml."""
    out = []
    for _, stem in _toc_files():
        text = (ROOT / f"{stem}.md").read_text()
        for m in re.finditer(rf"^:::+\{{{directive}\}}[^\n]*\n(?::[a-z]+:[^\n]*\n)*?:label: (\S+)", text, re.M):
            out.append((stem, m.group(1)))
    return out


def test_every_theorem_and_exercise_is_labelled_and_numbered_as_on_the_web():
    _need_pdf()
    aux = (LATEX / "book.aux").read_text(encoding="utf-8")
    labels = set(re.findall(r"\\newlabel\{(.+?)\}", aux))
    proofs = [(d, lab) for kind in ("theorem", "lemma", "proposition", "corollary", "definition")
              for d, lab in _source_labels(f"prf:{kind}")]
    exercises = _source_labels("exercise")
    assert proofs and exercises
    assert not [f"{d}:{lab}" for d, lab in proofs if f"{d}:{lab}" not in labels]
    assert not [lab for _, lab in exercises if f"exercise:{lab}" not in labels]
    # each box is numbered chapter.k, as in the HTML (not chapter.section.k)
    text = "\n".join(_pages())
    for kind in ("Theorem", "Exercise"):
        numbers = set(re.findall(rf"\b{kind} (\d+\.\d+(?:\.\d+)?)\b", text))
        assert numbers and all(n.count(".") == 1 for n in numbers), (kind, sorted(numbers)[:5])
    headed = set(re.findall(r"^\s*Exercise (\d+\.\d+)\s*$", text, re.M))
    assert len(headed) == len(exercises)  # every exercise box, once
    solutions = set(re.findall(r"Solution to Exercise (\d+\.\d+)", text))
    written = sum(len(re.findall(r"^(?::::+\{solution\}|```\{solution-start\})", (ROOT / f"{stem}.md").read_text(), re.M))
                  for _, stem in _toc_files())
    assert solutions <= headed and len(solutions) == written  # every solution, under its exercise's number


def test_nothing_runs_off_the_page_and_every_glyph_is_in_a_font():
    _need_pdf()
    log = _log()
    assert not re.findall(r"Missing character: There is no .*", log)
    widths = [float(w) for w in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)]
    assert max(widths, default=0.0) < OVERFULL_PT, sorted(widths)[-5:]


def _figures_in_notebooks() -> int:
    """PNG outputs of the executed chapters (the HTML build's downloadable notebooks)."""
    count = 0
    for path in (ROOT / "_build" / "html" / "_sources").rglob("*.ipynb"):
        for cell in json.loads(path.read_text()).get("cells", []):
            count += sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
    return count


@functools.cache
def _image_pages() -> list[int]:
    """The page of every image in the PDF (pdfimages -list; its smask rows are the images' alpha channels)."""
    rows = [line.split() for line in _run("pdfimages", "-list", str(PDF)).splitlines()[2:]]
    return [int(r[0]) for r in rows if len(r) > 2 and r[2] == "image"]


def test_every_figure_is_in_the_pdf():
    _need_pdf()
    images = _image_pages()
    expected = _figures_in_notebooks()
    if expected == 0:
        pytest.skip("no built HTML with executed notebooks to count the figures from")
    assert len(images) >= expected


def _page_with(needle: str, start: int = 0) -> int:
    for i, page in enumerate(_pages()[start:], start=start):
        if needle in page:
            return i + 1
    raise AssertionError(f"no PDF page contains {needle!r}")


def test_pages_rendered_for_a_human():
    _need_pdf()
    PAGES.mkdir(parents=True, exist_ok=True)
    body = _page_with("Learning goals")  # the first chapter's first page: past the contents
    chosen = {
        "contents": _page_with("CONTENTS"),
        "theorem-and-proof": _page_with("Theorem 3.1 (", body),
        "exercises-and-solutions": _page_with("Solution to Exercise 3.1", body),
        "table": _page_with("Table 4.", body),
        "first-figure": min(p for p in _image_pages() if p >= body),
        "figure-fixed-entropy": min(p for p in _image_pages() if p >= _page_with("6.4 Results", body)),
        "bibliography": _page_with("矩阵", body),
    }
    for name, page in chosen.items():
        target = PAGES / f"{name}-p{page:03d}"
        _run("pdftoppm", "-f", str(page), "-l", str(page), "-r", "80", "-png", "-singlefile", str(PDF), str(target))
        png = target.with_suffix(".png")
        assert png.is_file() and png.stat().st_size > 20_000, png  # a rendered page, not a blank one
