"""``python -m svmuon.bench NAME [options]``: run one benchmark, print its table, write its JSON result."""

import sys

import svmuon.bench
from svmuon._cli import dispatch


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark named by ``argv[0]`` with the remaining arguments; see ``--help``."""
    return dispatch(svmuon.bench, "benchmark", argv)


if __name__ == "__main__":
    sys.exit(main())
