"""The API reference's index: one table per module, a row per public name, linking to its entry.

``.. api-summary:: svmuon.spectral.entropy svmuon.spectral.spectrum ...`` (reST, so in an ``eval-rst``
block of a MyST page) writes, for each module, a table titled with the module (linked to its entry) and the
first sentence of its docstring, then a row per name that
``automodule :members:`` documents there (the module's ``__all__``, else its public functions and classes):
the name, linked to its entry, and the first sentence of its docstring. The table follows the library, so a
new public function appears in it without an edit of the page. ``module:a,b`` lists only ``a`` and ``b``
(for an ``automodule`` with an explicit ``:members:`` list), and ``module:`` the module alone.
"""

from __future__ import annotations

import importlib
import inspect
import re

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList

from book_pages import link_sources


def public_members(module) -> list[tuple[str, object]]:
    """What ``automodule :members:`` documents: ``__all__`` if the module has one, else its own public
    functions and classes (not those it imports), in source order."""
    if hasattr(module, "__all__"):
        names = list(module.__all__)
    else:
        own = [(n, o) for n, o in vars(module).items() if not n.startswith("_")
               and (inspect.isfunction(o) or inspect.isclass(o)) and getattr(o, "__module__", None) == module.__name__]
        names = [n for n, o in sorted(own, key=lambda item: _line(item[1]))]
    return [(n, getattr(module, n)) for n in names if hasattr(module, n)]


def _line(obj) -> int:
    try:
        return inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        return 0


_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\.[a-z])\.\s+(?=[A-Z(])")


def summary(obj) -> str:
    """The first sentence of a docstring's first paragraph, for a table cell ("" for a constant, whose
    ``__doc__`` is its type's)."""
    if not (inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj)):
        return ""
    doc = inspect.getdoc(obj) or ""
    first = " ".join(doc.split("\n\n", 1)[0].split())
    # a private name has no entry to link to: a literal (its own entry says the same, with its own check)
    first = re.sub(r":(?:py:)?\w+:`~?([\w.]*\._\w+|_\w+)`", r"``\1``", first)
    end = _SENTENCE_END.search(first)
    return first if end is None else first[:end.start() + 1]


def _entry(module: str, member: str, obj) -> str:
    if inspect.isclass(obj):
        return f":py:class:`~{module}.{member}`"
    if callable(obj):
        return f":py:func:`~{module}.{member}`"
    return f"``{member}``"  # a constant: autodoc gives it no entry of its own to link to


def _without_keys(text: str, bib_keys: set[str]) -> str:
    """``text`` without bibliography keys: a parenthesis of keys only is removed, other keys are deleted."""
    if not bib_keys:
        return text
    key = "|".join(map(re.escape, sorted(bib_keys, key=len, reverse=True)))
    text = re.sub(rf"\s*\((?:``)?(?:{key})(?:``)?(?:[,;]\s*(?:``)?(?:{key})(?:``)?)*\)", "", text)
    text = re.sub(rf"(?<![\w-])(?:``)?(?:{key})(?:``)?(?![\w-])", "", text)
    return re.sub(r"\s+([.,;:])", r"\1", text).strip()


def summary_rst(modules: list[str], bib_keys: set[str] = frozenset()) -> list[str]:
    """reST for the summary tables of ``modules`` (a ``list-table`` each), formulas and sources linked as on
    the entries themselves (``book_pages.link_sources``)."""
    lines = []
    for spec in modules:
        # "module" (what automodule :members: documents) or "module:a,b" (the members the page lists; none:
        # a package documented by its docstring alone)
        name, _, chosen = spec.partition(":")
        module = importlib.import_module(name)
        # a table caption holds no citation (a link in LaTeX's moving argument breaks the PDF): the keys of
        # the module's sources are dropped from its title; its entry below cites them
        title = link_sources([_without_keys(summary(module), bib_keys)], set())[0]
        members = public_members(module) if not _ else [(m, getattr(module, m)) for m in chosen.split(",") if m]
        # short names in the docstrings (:func:`msign`) resolve against the module, as on its own entry
        lines += [f".. py:currentmodule:: {name}", ""]
        if not members:
            lines += [f":py:mod:`{name}`: {title}", ""]
            continue
        lines += [f".. list-table:: :py:mod:`{name}`: {title}", "   :widths: 35 65",
                  "   :class: api-summary", ""]
        for member, obj in members:
            text = link_sources([summary(obj)], bib_keys)[0] or "(a constant: see the module)"
            lines += [f"   * - {_entry(name, member, obj)}", f"     - {text}"]
        lines.append("")
    return lines


class ApiSummary(Directive):
    """``.. api-summary:: module ...``: the summary tables of the named modules."""

    required_arguments = 1
    optional_arguments = 100

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        keys = getattr(self.state.document.settings.env.app, "_book_bib_keys", set())
        self.state.nested_parse(StringList(summary_rst(self.arguments, keys), source="api-summary"),
                                self.content_offset, container)
        return container.children


def setup(app) -> dict:
    app.add_directive("api-summary", ApiSummary)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
