"""Every built page is comfortable to read in a real browser, at a laptop and at a phone width.

Two kinds of tests:

* The checker itself (``tests/browser_check.py``) is tested on small synthetic pages, one defect each
  (a clipped equation, a shrunken figure, raw TeX, a console error, ...), and on a clean page: each
  check must fire on its defect, and only there.
* Every page of the built book is loaded in headless Chromium at 1300 px and 412 px (marked ``slow``; run
  after the build by ``.ci/run``). A full-page screenshot of each goes to ``_build/screenshots/`` (or
  ``$BOOK_SCREENSHOTS``).

The book is looked for in ``$BOOK_HTML`` (default ``_build/html``); without a build those tests skip,
unless ``BOOK_BROWSER_REQUIRED=1`` (set by CI), which also turns a missing Chromium into a failure.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

import browser_check as bc

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("BOOK_HTML", ROOT / "_build" / "html"))
SCREENSHOTS = Path(os.environ.get("BOOK_SCREENSHOTS", ROOT / "_build" / "screenshots"))
REQUIRED = os.environ.get("BOOK_BROWSER_REQUIRED") == "1"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def checker():
    if bc.chromium_path() is None:
        message = "no Chromium: apt-get install chromium (Debian's package), or set $CHROMIUM"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    with bc.Checker() as c:
        yield c


# --- the checker on synthetic pages ---------------------------------------------------------------------

_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>t</title>
<style>
  body {{ margin: 0; font: 16px sans-serif; }}
  main article {{ max-width: 700px; margin: 0 auto; }}
  div.math {{ overflow-x: auto; overflow-y: hidden;
              background: linear-gradient(to left, rgba(0, 0, 0, 0.2), transparent) right / 1em 100% no-repeat; }}
  img {{ max-width: 100%; }}
  td, th {{ padding: 0.25em 0.5em; }}
</style>
<script>window.MathJax = {{ options: {{ processHtmlClass: "math" }} }};</script>
<script defer src="mathjax/tex-chtml.js"></script>
</head><body><main><article class="bd-article">
{body}
</article></main></body></html>
"""

_CLEAN = r"""
<section id="s"><h1>A clean page</h1>
<p>Inline math <span class="math">\(x^2\)</span> and a display equation:</p>
<div class="math" id="equation-short"><span class="eqno">(1.1)</span>\[ H(p) = -\sum_i p_i \log p_i \]</div>
<img src="narrow.png" alt="a figure drawn for the column">
<div class="cell"><div class="cell_input"><div class="highlight"><pre>print("hello")</pre></div></div>
<div class="cell_output"><div class="output stream"><pre>hello
world</pre></div></div></div>
<figure id="fig-a"><div class="cell"><div class="cell_output"><img src="narrow.png"
  alt="a figure as myst-nb places it, in a numbered figure"></div></div>
<figcaption><p><span class="caption-number">Fig. 1.1 </span><span class="caption-text">A caption.</span></p></figcaption></figure>
<table><tr><td>a</td><td>small</td><td>table</td></tr></table>
<div class="cell"><div class="cell_output"><div class="output text_html"><table><caption>A captioned table</caption>
<tr><td>1.0</td><td>2.0</td></tr></table></div></div></div>
<p>Price in prose: 5 $ and a path C:\Temp are not TeX.</p>
</section>
"""
_DOWNLOAD = '<a href="nb.ipynb">download</a>'

# One defect each: (page body, width, expected kinds of problem, expect_ipynb)
_DEFECTS = {
    "clipped-equation": (r"""<div class="math" id="equation-long"><span class="eqno">(2.3)</span>\[
        a_1 + a_2 + a_3 + a_4 + a_5 + a_6 + a_7 + a_8 + a_9 + a_{10} + a_{11} + a_{12} + a_{13} + a_{14} + a_{15}
        + a_{16} + a_{17} + a_{18} + a_{19} + a_{20} + a_{21} + a_{22} + a_{23} + a_{24} + a_{25} + a_{26} \]</div>""",
                         1300, {"clipped-equation"}, False),
    "equation-start-cut": (r"""<div class="math" style="display: flex; flex-direction: column; align-items: center">
        \[ a_1 + a_2 + a_3 + a_4 + a_5 + a_6 + a_7 + a_8 + a_9 + a_{10} + a_{11} + a_{12} + a_{13} \]</div>""",
                           412, {"clipped-equation"}, False),  # centred flex item wider than the phone
    "equation-under-number": (r"""<div class="math" style="position: relative"><span class="eqno"
        style="position: absolute; left: 40%; top: 0.5em; width: 20%; background: #fff">(3.1)</span>
        \[ x + y = z \]</div>""", 1300, {"clipped-equation"}, False),
    "small-figure": ('<img src="wide.png" alt="a figure drawn too wide for the column">', 1300, {"small-figure"}, False),
    "broken-image": ('<img src="missing.png" alt="an image file that is not there">', 1300, {"broken-image", "request"}, False),
    "raw-tex": (r'<p class="tex2jax_ignore">The mean is $\mu_1 + \sigma^2$ here.</p>', 1300, {"raw-tex"}, False),
    "raw-tex-command": (r'<p class="tex2jax_ignore">A rate \eta left as a macro.</p>', 1300, {"raw-tex"}, False),
    "raw-tex-not-typeset": (r'<div class="math">\[ \frac{1}{2 \]</div>', 1300, {"raw-tex"}, False),  # no closing brace
    "mathjax-error": (r'<div class="math">\[ x^1^2 \]</div>', 1300, {"mathjax"}, False),  # "Double exponent"
    "mathjax-undefined": (r'<div class="math">\[ \notamacro{x} \]</div>', 1300, {"mathjax"}, False),
    "console-error": ('<script>console.error("something failed")</script>', 1300, {"console"}, False),
    "declared-twice": ("<script>const URL_A = 1</script><script>const URL_A = 2</script>", 1300, {"console"}, False),
    "page-scroll": ('<div style="width: 900px">a wide block</div>', 412, {"page-scroll"}, False),
    "code-scroll": ('<div class="highlight"><pre style="white-space: pre; overflow-x: auto">' + "x = 1  # " + "long comment " * 20
                    + "</pre></div>", 1300, {"code-scroll"}, False),
    "table-scroll": ('<div class="cell_output"><div class="output text_html" style="overflow-x: auto"><table class="dataframe">'
                     + "<caption>wide</caption><tr>" + "<td>column&nbsp;with&nbsp;a&nbsp;long&nbsp;name</td>" * 8 + "</tr></table></div></div>",
                     1300, {"table-scroll"}, False),
    "split-output": ('<div class="cell_output"><div class="output stream"><pre>a</pre></div>'
                     '<div class="output stream"><pre>b</pre></div></div>', 1300, {"split-output"}, False),
    "empty-output": ('<div class="cell_output"><div class="output stream"><pre></pre></div></div>', 1300,
                     {"empty-output"}, False),
    "figure-uncaptioned": ('<div class="cell"><div class="cell_output"><img src="narrow.png" alt="a plot of the '
                           'loss against the step"></div></div>', 1300, {"figure"}, False),
    "figure-alt-is-a-path": ('<img src="narrow.png" alt="_images/narrow.png">', 1300, {"figure"}, False),
    "table-unpadded": ('<table><tr><td style="padding: 0">2.0840</td><td style="padding: 0">2.0610</td></tr>'
                       "</table>", 1300, {"table"}, False),
    "table-uncaptioned": ('<div class="cell_output"><table><tr><td>1.0</td></tr></table></div>', 1300, {"table"},
                          False),
    "code-wrap": ('<div class="cell"><div class="cell_input"><div class="highlight"><pre style="white-space: pre-wrap">'
                  + "x = 1  # " + "a long comment " * 12 + "</pre></div></div></div>", 1300, {"code-wrap"}, False),
    "equation-no-cue": (r"""<div class="math" style="background: none">\[ a_1 + a_2 + a_3 + a_4 + a_5 + a_6 + a_7
        + a_8 + a_9 + a_{10} + a_{11} + a_{12} + a_{13} + a_{14} + a_{15} + a_{16} \]</div>""", 412, {"equation-cue"},
                        False),
    "ipynb-printed-twice": ('<a href="twice.ipynb">download</a>', 1300, {"ipynb"}, True),
    "no-ipynb": ("<p>no download link</p>", 1300, {"ipynb"}, True),
    "ipynb-not-executed": ('<a href="blank.ipynb">download</a>', 1300, {"ipynb"}, True),
    "ipynb-missing": ('<a href="gone.ipynb">download</a>', 1300, {"ipynb"}, True),
    "network": ('<link rel="stylesheet" href="https://example.org/style.css">', 1300, {"request"}, False),
}


def _png(path: Path, width: int, height: int = 60) -> None:
    from PIL import Image

    Image.new("RGB", (width, height), (200, 220, 240)).save(path)


def _notebook(path: Path, executed: bool, twice: bool = False) -> None:
    outputs = [{"output_type": "stream", "name": "stdout", "text": "1\n"}] if executed else []
    if twice:  # what an in-place stream merge leaves: the merged first piece, and the second piece again
        outputs = [{"output_type": "stream", "name": "stdout", "text": "q -> 0 : log(3)\nq -> oo : log(2)\n"},
                   {"output_type": "stream", "name": "stdout", "text": "q -> oo : log(2)\n"}]
    cell = {"cell_type": "code", "execution_count": 1 if executed else None, "metadata": {},
            "outputs": outputs, "source": "print(1)"}
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]}))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A folder of synthetic pages with MathJax (the copy the book serves), two images, three notebooks."""
    root = tmp_path_factory.mktemp("site")
    sys.path.insert(0, str(ROOT / "_ext"))
    from offline_mathjax import _mathjax_es5  # the book's own MathJax source (django-static-mathjax)

    (root / "mathjax").symlink_to(_mathjax_es5(), target_is_directory=True)
    _png(root / "narrow.png", 400)  # fits the 700 px column: shown at full size
    _png(root / "wide.png", 1200)  # shown at 700/1200 = 0.58 of its width
    _notebook(root / "nb.ipynb", executed=True)
    _notebook(root / "blank.ipynb", executed=False)
    _notebook(root / "twice.ipynb", executed=True, twice=True)
    (root / "clean.html").write_text(_PAGE.format(body=_CLEAN + _DOWNLOAD))
    for name, (body, *_rest) in _DEFECTS.items():
        (root / f"{name}.html").write_text(_PAGE.format(body=_CLEAN + body))
    with bc.serve(root) as base:
        yield base


def _kinds(report: bc.PageReport) -> set[str]:
    return {p.split(":", 1)[0] for p in report.problems}


@pytest.mark.parametrize("width", [bc.DESKTOP, bc.PHONE])
def test_clean_page_has_no_problems(checker, site, width):
    report = checker.check(site + "clean.html", width, expect_ipynb=True)
    assert report.problems == []


@pytest.mark.parametrize("name", sorted(_DEFECTS))
def test_checker_finds_each_defect(checker, site, name):
    _, width, expected, expect_ipynb = _DEFECTS[name]
    report = checker.check(site + f"{name}.html", width, expect_ipynb=expect_ipynb)
    assert _kinds(report) == expected, report.problems


def test_desktop_checks_do_not_fire_on_a_phone(checker, site):
    # at 412 px a long equation scrolls inside its own box and a figure fills the width: both are fine there
    for name in ("clipped-equation", "small-figure"):
        assert checker.check(site + f"{name}.html", bc.PHONE).problems == []


def test_screenshot_is_written(checker, site, tmp_path):
    shot = tmp_path / "clean.png"
    report = checker.check(site + "clean.html", bc.PHONE, screenshot=shot)
    assert report.screenshot == shot and shot.stat().st_size > 1000
    from PIL import Image

    assert Image.open(shot).size[0] == bc.PHONE


# --- every page of the built book -----------------------------------------------------------------------


def _notebook_pages() -> set[str]:
    """Built pages whose source is a notebook (a chapter with a kernelspec): they must offer a .ipynb."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    stems = [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]
    pages = set()
    for stem in stems:
        src = ROOT / f"{stem}.md"
        if src.exists() and "kernelspec" in src.read_text().split("\n---", 1)[0]:
            pages.add(f"{stem}.html")
    return pages


def _book_cases() -> list:
    if not (HTML / "index.html").exists():
        reason = f"no built book in {HTML}: build it first (README), or set BOOK_HTML"
        return [pytest.param(None, None, marks=pytest.mark.skipif(not REQUIRED, reason=reason))]
    return [pytest.param(page, width, id=f"{page}@{width}") for page in bc.built_pages(HTML)
            for width in (bc.DESKTOP, bc.PHONE)]


@pytest.fixture(scope="module")
def book():
    with bc.serve(HTML) as base:
        yield base


# Pages whose chapter is being rewritten elsewhere: until that rewrite gives them the finish (captions, alt
# text, captioned tables, 80-column code), those four checks are reported but not failed there. Every other
# check applies; and once a page passes the four, it must be removed from this list.
PENDING_PAGES: set[str] = set()  # e.g. {"chapters/part2/stiefel.html"}
PENDING_KINDS = {"figure", "table", "code-wrap", "equation-cue"}


@pytest.mark.slow
@pytest.mark.parametrize("page, width", _book_cases())
def test_built_page(checker, book, page, width):
    assert page is not None, f"no built book in {HTML}"
    shot = SCREENSHOTS / f"{page[:-5].replace('/', '__')}-{width}.png"
    report = checker.check(book + page, width, expect_ipynb=page in _notebook_pages(), screenshot=shot)
    problems = report.problems
    if page in PENDING_PAGES:
        pending = [p for p in problems if p.split(":", 1)[0] in PENDING_KINDS]
        problems = [p for p in problems if p not in pending]
        if width == bc.DESKTOP:  # the desktop checks include them all
            assert pending, f"{page} now passes the pending checks: remove it from PENDING_PAGES"
    assert problems == [], f"{page} at {width}px (screenshot {shot}):\n  " + "\n  ".join(problems)


def test_printed_twice_flags_an_in_place_merge_only():
    stream = lambda text: {"output_type": "stream", "name": "stdout", "text": text}  # noqa: E731
    cell = lambda *outs: {"cell_type": "code", "outputs": list(outs)}  # noqa: E731
    nb = {"cells": [cell(stream("a\nb\n"), stream("b\n")),  # the merge left "b" twice
                    cell(stream("ok\n"), stream("ok\n")),  # a line printed twice by the code: fine
                    cell(stream("a\n"), stream("b\n")),  # two pieces, each once: fine
                    {"cell_type": "markdown", "source": "x"},
                    cell(stream(["x\n", "y\n"]), stream("y\n"))]}  # text as a list of lines
    assert bc.printed_twice(nb) == [0, 3]


def test_every_chapter_is_checked_for_a_notebook():
    # the .ipynb check must cover every notebook chapter of the table of contents, the intro included
    pages = _notebook_pages()
    assert "chapters/intro.html" in pages and len(pages) >= 9
