"""The ``python -m svmuon.bench NAME`` / ``python -m svmuon.experiments NAME`` dispatcher.

NAME picks the module ``<package>.<NAME with '-' as '_'>`` (private modules excluded), which defines
``main(argv) -> int``; the remaining arguments go to it.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from types import ModuleType


def available(package: ModuleType) -> list[str]:
    """The command names ``package`` provides: its public modules, with '-' for '_'."""
    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))


def dispatch(package: ModuleType, kind: str, argv: list[str] | None = None) -> int:
    """Run ``<package>.<NAME>.main(rest)`` for ``argv = [NAME, *rest]``; 2 for a missing or unknown NAME."""
    argv = sys.argv[1:] if argv is None else argv
    names = available(package)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: python -m {package.__name__} NAME [options]   (NAME --help for its options)")
        print(f"{kind}s:", ", ".join(names))
        return 0 if argv else 2
    name, rest = argv[0].replace("_", "-"), argv[1:]  # monte_carlo and monte-carlo both work
    if name not in names:
        print(f"unknown {kind} {name!r}; choose one of: {', '.join(names)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{package.__name__}.{name.replace('-', '_')}")
    return int(module.main(rest) or 0)


def describe(doc: str | None) -> str:
    """The first paragraph of a module docstring as plain text, for ``argparse`` descriptions."""
    first = (doc or "").strip().split("\n\n")[0]
    text = " ".join(first.split())
    return re.sub(r":\w+:`~?([^`]+)`", r"\1", text).replace("``", "")
