"""Load built HTML pages in headless Chromium and list what would make them uncomfortable to read.

Used by ``tests/test_browser.py`` (on small synthetic pages, to test the checks themselves, and on every
page of the built book) and runnable by hand::

    .venv/bin/python tests/browser_check.py _build/html --screenshots _build/screenshots

The browser is Debian's ``chromium`` (``/usr/bin/chromium``, or ``$CHROMIUM``) driven through Playwright;
Playwright's own browser downloads are never used. Pages are served from a local HTTP server and every
request to another host is refused and reported, so a page that passes also reads offline.

Checks (each problem is one line ``kind: detail``):

* ``console``: a console error or an uncaught exception (e.g. a script declared twice);
* ``request``: a resource that failed to load (HTTP status >= 400) or needed the network;
* ``mathjax``: MathJax missing on a page with math, a TeX error box (``merror``), or an undefined macro;
* ``raw-tex``: TeX source left as text outside code (``$x$``, ``\\alpha``, ``\\[``);
* ``clipped-equation``: a display equation wider than its box (``desktop`` widths only), or one drawn under
  its equation number (every width);
* ``small-figure``: an image shown below ``min_figure_ratio`` of its natural width (``desktop`` only);
* ``broken-image``: an image that did not load;
* ``code-scroll``: a code cell (input or text output) that scrolls sideways (``desktop`` only);
* ``table-scroll``: a table wider than the column, which scrolls inside its box (``desktop`` only);
* ``split-output`` / ``empty-output``: one cell's stdout shown in several boxes, or an empty output box;
* ``figure``: a figure of a cell without a numbered caption, or an image without real alt text (none, or its
  file name);
* ``table``: a table without room between its columns (cell padding below 3 px), or a table of a cell's
  output without a caption;
* ``code-wrap``: a line of a code cell longer than the code column, which wraps mid-token (``desktop``
  only);
* ``equation-cue``: a display equation that scrolls inside its box with nothing to show that it does (every
  width);
* ``page-scroll``: the page itself scrolls sideways (every width);
* ``ipynb``: no ``.ipynb`` download link where one is expected, the file is not an executed notebook, or a
  cell of it prints its output twice.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import http.server
import os
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from notebook_check import check_ipynb as _check_ipynb, printed_twice  # noqa: F401, E402 - re-exported

DESKTOP, PHONE = 1300, 412  # the widths the book is checked at: a laptop window and a large phone
MIN_FIGURE_RATIO = 0.8  # a figure shown below 80 % of its natural width has labels too small to read

# TeX left as text: $...$ with a TeX-looking body, $$, \( \) \[ \], a macro with a braced argument, or a common
# macro name (a Windows path such as C:\Temp is not TeX).
_MACROS = ("alpha beta gamma delta epsilon varepsilon eta theta lambda mu nu pi rho sigma tau phi varphi psi "
           "omega Gamma Delta Sigma Phi Omega frac sum prod int log exp sqrt cdot cdots ldots dots times le leq ge "
           "geq ne neq approx sim infty partial nabla top mathbb mathrm mathcal operatorname text left right "
           "begin end quad qquad in subset mid lVert rVert Vert langle rangle")
RAW_TEX = (r"(\$\$|\\[\(\)\[\]]|\\[A-Za-z]+\{|\\(?:" + "|".join(_MACROS.split()) + r")(?![A-Za-z])"
           r"|(?<![\w$])\$[^$\s][^$]*[\\^_{}][^$]*\$)")


def chromium_path() -> str | None:
    """The Chromium executable: ``$CHROMIUM`` if set, else ``chromium`` (Debian) on the PATH, else None."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env
    return shutil.which("chromium") or shutil.which("chromium-browser")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


@contextlib.contextmanager
def serve(directory: Path):
    """Serve ``directory`` on 127.0.0.1 (a free port) in a thread; yield the base URL ending in '/'."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class PageReport:
    """What one page showed at one width: its problems and where its screenshot went."""

    url: str
    width: int
    problems: list[str] = field(default_factory=list)
    screenshot: Path | None = None


# Runs in the page after load and MathJax; returns a list of "kind: detail" strings.
_PAGE_CHECKS = r"""
({desktop, minRatio, rawTex}) => {
  const out = [];
  const article = document.querySelector("main article, article.bd-article, .bd-article, main") || document.body;
  const short = (s) => s.replace(/\s+/g, " ").trim().slice(0, 90);
  const where = (el) => {
    const sec = el.closest("section[id]");
    const eq = el.closest("div.math[id]");
    return (eq ? "#" + eq.id : sec ? "#" + sec.id : "") ;
  };
  // MathJax: present where there is math, no error boxes, no undefined macros (shown as red \name text)
  const hasMath = document.querySelector(".math, mjx-container") !== null;
  if (hasMath && !(window.MathJax && window.MathJax.startup)) out.push("mathjax: the page has math but MathJax did not load");
  for (const e of document.querySelectorAll("mjx-merror, [data-mjx-error]"))
    out.push(`mathjax: TeX error ${short(e.getAttribute("data-mjx-error") || e.textContent)} ${where(e)}`);
  // an undefined macro is typeset as its name in red (MathJax's noundefined); CHTML draws characters with
  // CSS, so the text is read back from the mjx-c class names (mjx-c5C is "\\")
  const chars = (el) => [...el.querySelectorAll("mjx-c")].map((c) => {
    const m = [...c.classList].join(" ").match(/mjx-c([0-9A-F]+)/);
    return m ? String.fromCodePoint(parseInt(m[1], 16)) : "";
  }).join("");
  for (const t of document.querySelectorAll('mjx-container mjx-mtext[style*="color: red"]'))
    out.push(`mathjax: undefined macro ${short(chars(t) || t.textContent)} ${where(t)}`);
  // raw TeX in prose (not in code, scripts or typeset math)
  // (TeX still inside a .math element after typesetting was not typeset: that is raw TeX too)
  const skip = "pre, code, script, style, textarea, mjx-container, .highlight, .MathJax, nav, .bd-sidebar-primary";
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  const tex = new RegExp(rawTex);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const p = n.parentElement;
    if (!p || p.closest(skip)) continue;
    const m = n.textContent.match(tex);
    if (m) out.push(`raw-tex: "${short(n.textContent.slice(Math.max(0, m.index - 20), m.index + 40))}" ${where(p)}`);
  }
  // display equations wider than their box (they scroll or are cut off)
  if (desktop) {
    for (const c of document.querySelectorAll('mjx-container[display="true"]')) {
      const box = c.closest("div.math") || c.parentElement;
      const over = Math.max(c.scrollWidth - c.clientWidth, box.scrollWidth - box.clientWidth);
      if (over > 2) {
        const num = box.querySelector(".eqno");
        out.push(`clipped-equation: ${num ? num.firstChild.textContent.trim() + " " : ""}${over}px too wide ${where(c)}`);
      }
    }
  }
  // a display equation whose start is cut off (centred and wider than its box: its left part cannot be
  // scrolled to), at any width
  for (const c of document.querySelectorAll('mjx-container[display="true"]')) {
    const m = c.querySelector("mjx-math"), box = c.closest("div.math") || c;
    const left = Math.max(c.getBoundingClientRect().left, box.getBoundingClientRect().left);
    if (m && m.getBoundingClientRect().left < left - 2 && c.scrollLeft === 0 && box.scrollLeft === 0) {
      const num = c.closest("div.math") && c.closest("div.math").querySelector(".eqno");
      out.push(`clipped-equation: ${num ? num.firstChild.textContent.trim() + " " : ""}its start is cut off ${where(c)}`);
    }
  }
  // an equation number drawn over its equation (at any width)
  for (const box of document.querySelectorAll("div.math")) {
    const num = box.querySelector(".eqno"), math = box.querySelector("mjx-math");
    if (!num || !math) continue;
    const a = num.getBoundingClientRect(), b = math.getBoundingClientRect(), c = box.getBoundingClientRect();
    const visibleRight = Math.min(b.right, c.right);  // the part of the equation not scrolled out of its box
    if (a.left < visibleRight - 2 && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
      out.push(`clipped-equation: ${num.firstChild.textContent.trim()} is drawn over its number ${where(box)}`);
  }
  // images: broken, or shown much smaller than drawn
  for (const img of article.querySelectorAll("img")) {
    const src = img.getAttribute("src") || "";
    if (img.complete && img.naturalWidth === 0) { out.push(`broken-image: ${src.slice(0, 80)}`); continue; }
    const w = img.getBoundingClientRect().width;
    if (desktop && img.naturalWidth >= 120 && w > 0 && w < minRatio * img.naturalWidth)
      out.push(`small-figure: ${src.split("/").pop().slice(0, 60)} shown at ${(w / img.naturalWidth).toFixed(2)} of its ${img.naturalWidth}px width ${where(img)}`);
  }
  // code cells and text outputs that scroll sideways
  if (desktop) {
    for (const pre of article.querySelectorAll("div.cell pre, div.highlight pre, div.output pre")) {
      const over = pre.scrollWidth - pre.clientWidth;
      if (over > 2) {
        const line = pre.textContent.split("\n").reduce((a, b) => (b.length > a.length ? b : a), "");
        out.push(`code-scroll: ${over}px too wide: "${short(line).slice(0, 60)}" ${where(pre)}`);
      }
    }
  }
  // tables (pandas output or Markdown) wider than the column: they scroll inside their box
  if (desktop) {
    for (const t of article.querySelectorAll("table")) {
      const box = t.closest("div.output, div.cell_output, div.pst-scrollable-table-container, .table-wrapper") || t.parentElement;
      const over = Math.max(t.getBoundingClientRect().width, t.scrollWidth) - box.clientWidth;
      if (over > 2) out.push(`table-scroll: a table ${Math.round(over)}px wider than the column ${where(t)}`);
    }
  }
  // figures: a cell's image sits in a numbered figure with a caption; every image has real alt text
  for (const img of article.querySelectorAll("img:not(.toggler)")) {  // .toggler: Sphinx's +/- of an index
    const src = img.getAttribute("src") || "", alt = (img.getAttribute("alt") || "").trim();
    const file = src.split("/").pop();
    if (alt.split(/\s+/).length < 4 || alt.includes(file) || /\.(png|svg|jpe?g)$/i.test(alt))
      out.push(`figure: ${file.slice(0, 40)} has no real alt text ("${short(alt).slice(0, 40)}") ${where(img)}`);
    if (img.closest("div.cell_output")) {
      const fig = img.closest("figure");
      const cap = fig && fig.querySelector("figcaption .caption-number");
      if (!cap) out.push(`figure: ${file.slice(0, 40)} has no numbered caption ${where(img)}`);
    }
  }
  // tables: room between the columns, and a caption on the tables of cell outputs
  for (const t of article.querySelectorAll("table")) {
    const cell = t.querySelector("td");
    if (cell) {
      const cs = getComputedStyle(cell);
      const pad = Math.min(parseFloat(cs.paddingLeft), parseFloat(cs.paddingRight));
      if (pad < 3) out.push(`table: cells padded by ${pad}px, their contents run together ${where(t)}`);
    }
    if (t.closest("div.cell_output")) {
      const cap = t.querySelector("caption");
      if (!cap || cap.textContent.trim() === "") out.push(`table: a table without a caption ${where(t)}`);
    }
  }
  // code lines longer than the code column: they wrap, mid-token
  if (desktop) {
    const canvas = document.createElement("canvas").getContext("2d");
    for (const pre of article.querySelectorAll("div.cell_input pre")) {
      const cs = getComputedStyle(pre);
      canvas.font = `${cs.fontSize} ${cs.fontFamily}`;
      const room = pre.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      const longest = pre.textContent.split("\n").reduce((a, b) => (b.length > a.length ? b : a), "");
      const w = canvas.measureText(longest).width;
      if (w > room + 1) out.push(`code-wrap: a ${longest.length}-character line wraps in a ${Math.round(room)}px column: "${short(longest).slice(0, 50)}" ${where(pre)}`);
    }
  }
  // a display equation that scrolls shows it: a visible cue (the book's CSS draws edge shadows)
  for (const box of document.querySelectorAll("div.math")) {
    const scroller = [box, box.querySelector("mjx-container")].find((e) => e && e.scrollWidth > e.clientWidth + 2);
    if (scroller && getComputedStyle(scroller).backgroundImage === "none") {
      const num = box.querySelector(".eqno");
      out.push(`equation-cue: ${num ? num.firstChild.textContent.trim() + " " : ""}scrolls without a scroll cue ${where(box)}`);
    }
  }
  // one cell's stdout in several boxes, or empty output boxes
  for (const cell of article.querySelectorAll("div.cell_output")) {
    const streams = [...cell.children].filter((c) => c.matches(".output.stream"));
    if (streams.length > 1) out.push(`split-output: one cell's output in ${streams.length} boxes ${where(cell)}`);
    const media = "img, table, mjx-container, svg, iframe, video";
    for (const o of cell.children)  // an image is a direct child of the output area: not an empty box
      if (!o.matches(media) && !o.querySelector(media) && o.textContent.trim() === "")
        out.push(`empty-output: an empty output box ${where(cell)}`);
  }
  // the page itself scrolls sideways
  const doc = document.documentElement;
  if (doc.scrollWidth > window.innerWidth + 1) {
    const culprits = [...article.querySelectorAll("*")]
      .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1)
      .filter((e) => !e.parentElement || e.parentElement.getBoundingClientRect().right <= window.innerWidth + 1)
      .slice(0, 3).map((e) => e.tagName.toLowerCase() + (e.className && typeof e.className === "string" ? "." + e.className.split(" ")[0] : ""));
    out.push(`page-scroll: the page is ${doc.scrollWidth}px wide in a ${window.innerWidth}px window (${culprits.join(", ")})`);
  }
  return out;
}
"""

# Before checking: load lazy images now, and wait for every image and for MathJax's typesetting.
_SETTLE = r"""
async () => {
  for (const img of document.images) img.loading = "eager";
  await Promise.all([...document.images].filter((i) => !i.complete)
    .map((i) => new Promise((r) => { i.addEventListener("load", r); i.addEventListener("error", r); })));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await document.fonts.ready;
}
"""


class Checker:
    """One headless Chromium; :meth:`check` loads a page at a width and returns its :class:`PageReport`."""

    def __init__(self, executable: str | None = None):
        from playwright.sync_api import sync_playwright

        executable = executable or chromium_path()
        if executable is None:
            raise FileNotFoundError("no Chromium: install Debian's package (apt-get install chromium) or set $CHROMIUM")
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=executable, args=["--disable-gpu"])
        except Exception:
            self._pw.stop()
            raise

    def close(self) -> None:
        self._browser.close()
        self._pw.stop()

    def __enter__(self) -> "Checker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check(self, url: str, width: int, *, expect_ipynb: bool = False, screenshot: Path | None = None,
              min_figure_ratio: float = MIN_FIGURE_RATIO, timeout_ms: int = 60_000) -> PageReport:
        """Load ``url`` at ``width`` CSS pixels and report its problems (see the module docstring).

        ``desktop`` checks (clipped equations, small figures, code scrolling) run at widths >= 1000 px; the
        page-scroll check runs at every width. ``screenshot``: a path for a full-page PNG.
        """
        report = PageReport(url, width)
        problems = report.problems
        origin = urlsplit(url)._replace(path="", query="", fragment="").geturl()
        context = self._browser.new_context(viewport={"width": width, "height": 900}, device_scale_factor=1)
        page = context.new_page()
        page.set_default_timeout(timeout_ms)

        def route(r):
            if r.request.url.startswith(origin) or r.request.url.startswith("data:"):
                r.continue_()
            else:
                problems.append(f"request: needs the network: {r.request.url[:100]}")
                r.abort()

        page.route("**/*", route)
        page.on("console", lambda m: problems.append(f"console: {m.text[:200]}") if m.type == "error"
                and "Failed to load resource" not in m.text else None)  # failed loads are reported with their URL below
        page.on("pageerror", lambda e: problems.append(f"console: uncaught {str(e)[:200]}"))
        page.on("response", lambda r: problems.append(f"request: HTTP {r.status} for {r.url[len(origin):][:100]}")
                if r.status >= 400 else None)
        try:
            page.goto(url, wait_until="load")
            page.evaluate(_SETTLE)
            problems += page.evaluate(_PAGE_CHECKS, {"desktop": width >= 1000, "minRatio": min_figure_ratio,
                                                      "rawTex": RAW_TEX})
            hrefs = page.eval_on_selector_all('a[href$=".ipynb"]', "els => els.map(e => e.getAttribute('href'))")
            if expect_ipynb:
                problems += _check_ipynb(context, page.url, hrefs)
            if screenshot is not None:
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshot), full_page=True)
                report.screenshot = screenshot
        finally:
            context.close()
        return report


def is_redirect(path: Path) -> bool:
    """Whether an HTML file only forwards to another page (Jupyter Book's root ``index.html``)."""
    head = path.read_text(encoding="utf8", errors="replace")[:500].lower()
    return 'http-equiv="refresh"' in head and "<body" not in head


def built_pages(html_dir: Path) -> list[str]:
    """Every page of a built book, relative to ``html_dir``: no assets, no redirects."""
    skip = ("_static", "_sources", "_images")
    return sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html")
                  if p.relative_to(html_dir).parts[0] not in skip and not is_redirect(p))


def main(argv: list[str] | None = None) -> int:
    """Check every page of a built book at both widths; print the problems; 1 if there are any."""
    ap = argparse.ArgumentParser(description="Check every page of a built book in headless Chromium.")
    ap.add_argument("html", type=Path, help="the built book, e.g. _build/html")
    ap.add_argument("--screenshots", type=Path, default=None, help="folder for full-page screenshots")
    ap.add_argument("--widths", type=int, nargs="+", default=[DESKTOP, PHONE], help="window widths in CSS px")
    ap.add_argument("--pages", nargs="+", default=None, metavar="GLOB",
                    help="only pages matching one of these patterns, e.g. 'chapters/part1/*' (default: all)")
    args = ap.parse_args(argv)
    failed = 0
    with serve(args.html) as base, Checker() as checker:
        pages = [p for p in built_pages(args.html)
                 if args.pages is None or any(fnmatch.fnmatch(p, g) or fnmatch.fnmatch(p, g + ".html") for g in args.pages)]
        for rel in pages:
            for width in args.widths:
                shot = args.screenshots / f"{rel[:-5].replace('/', '__')}-{width}.png" if args.screenshots else None
                report = checker.check(base + rel, width, screenshot=shot)
                failed += bool(report.problems)
                print(f"{'FAIL' if report.problems else 'ok  '} {rel} @ {width}px")
                for p in report.problems:
                    print("     ", p)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
