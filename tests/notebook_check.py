"""The ``.ipynb`` downloads of the built book: linked, executed, and each output printed once.

Used by ``browser_check.py`` on every page that offers a download, and tested on synthetic notebooks in
``tests/test_browser.py``.
"""

from __future__ import annotations

import json
from urllib.parse import urljoin


def check_ipynb(context, page_url: str, hrefs: list[str]) -> list[str]:
    """The page links a ``.ipynb`` that downloads as an nbformat-4 notebook with executed outputs."""
    if not hrefs:
        return ["ipynb: no .ipynb download link on the page"]
    problems = []
    for href in dict.fromkeys(hrefs):
        response = context.request.get(urljoin(page_url, href))
        if not response.ok:
            problems.append(f"ipynb: the download link {href} answers HTTP {response.status}")
            continue
        try:
            nb = json.loads(response.body())
        except ValueError:
            problems.append(f"ipynb: {href} is not JSON")
            continue
        if nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
            problems.append(f"ipynb: {href} is not an nbformat-4 notebook")
            continue
        code = [c for c in nb["cells"] if c.get("cell_type") == "code"]
        if code and not any(c.get("outputs") for c in code):
            problems.append(f"ipynb: {href} has code cells but no outputs (not executed)")
        twice = printed_twice(nb)
        if twice:
            problems.append(f"ipynb: {href} prints output twice in cells {twice[:8]}")
    return problems


def _text(output: dict) -> str:
    text = output.get("text", "")
    return "".join(text) if isinstance(text, list) else text


def printed_twice(nb: dict) -> list[int]:
    """Indices of the code cells of ``nb`` whose stream output repeats itself.

    The symptom of a stream merge done in place (myst-nb's ``coalesce_streams``): the first piece of a
    stream holds every later piece, and the later pieces are kept as well. A cell whose pieces simply repeat
    a line (``"ok\n"`` twice) is not flagged: only a first piece that is longer than, and ends with, all the
    later pieces together.
    """
    flagged = []
    for i, cell in enumerate(c for c in nb.get("cells", []) if c.get("cell_type") == "code"):
        by_name: dict[str, list[str]] = {}
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                by_name.setdefault(o.get("name", "stdout"), []).append(_text(o))
        for pieces in by_name.values():
            rest = "".join(p.rstrip() + "\n" for p in pieces[1:] if p.strip())
            if len(pieces) > 1 and rest and len(pieces[0]) > len(rest) and pieces[0].endswith(rest):
                flagged.append(i)
                break
    return flagged
