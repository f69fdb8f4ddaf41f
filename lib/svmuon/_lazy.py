"""Lazy attribute loading for package ``__init__`` modules (PEP 562).

``import svmuon`` stays cheap and does not pull in pandas, SymPy or cvxpy until a name that needs
them is used; each public name maps to the module that defines it.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return ``(__getattr__, __dir__)`` resolving ``name -> exports[name]`` (a module path) on first use."""

    def __getattr__(name: str) -> Any:
        try:
            module = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
