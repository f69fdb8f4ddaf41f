"""``python -m svmuon.experiments NAME [options]``: run one experiment and write its results file.

NAME picks the module ``svmuon.experiments.<NAME with '-' as '_'>``, which defines ``main(argv) -> int``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import svmuon.experiments as _pkg


def available() -> list[str]:
    """Names of the experiments this installation provides."""
    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(_pkg.__path__) if not m.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = available()
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        print("experiments:", ", ".join(names))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in names:
        print(f"unknown experiment {name!r}; choose one of: {', '.join(names)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"svmuon.experiments.{name.replace('-', '_')}")
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
