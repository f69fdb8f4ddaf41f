"""Lazy attribute loading for package ``__init__`` modules (PEP 562).

``import svmuon`` stays cheap and does not pull in pandas, SymPy or cvxpy until a name that needs
them is used; each public name maps to the module that defines it.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return ``(__getattr__, __dir__)`` resolving ``name -> exports[name]`` (a module path) on first use;
    an entry ``name -> f"{package}.{name}"`` exports that submodule itself (``svmuon.results``)."""

    def __getattr__(name: str) -> Any:
        try:
            module = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        loaded = importlib.import_module(module)
        return loaded if module == f"{package}.{name}" else getattr(loaded, name)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
