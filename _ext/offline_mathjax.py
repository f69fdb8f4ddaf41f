"""Serve MathJax from the book itself, so that equations render offline.

The MathJax 3 distribution comes from the PyPI package ``django-static-mathjax`` (installed by
requirements.txt; it has no dependencies and needs no Django at build time). Its ``es5`` folder is copied
into ``_static/mathjax`` of the HTML output and ``mathjax_path`` points there, replacing the CDN.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

_SKIP = ("sre",)  # the speech-rule engine (accessibility narration) is 10+ MB and loaded only on request


def _mathjax_es5() -> Path:
    try:
        import mathjax  # the django-static-mathjax distribution
    except ImportError as exc:  # pragma: no cover - a broken install, reported clearly
        raise ExtensionError("offline_mathjax: install django-static-mathjax (see requirements.txt)") from exc
    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (es5 / "tex-chtml.js").is_file():
        raise ExtensionError(f"offline_mathjax: no tex-chtml.js under {es5}")
    return es5


def _copy(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    shutil.copytree(_mathjax_es5(), target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*_SKIP))


def _configure(app: Sphinx, config) -> None:
    _mathjax_es5()  # fail early, before a long build, if MathJax is missing
    config.mathjax_path = "mathjax/tex-chtml.js"


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _configure, priority=900)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
