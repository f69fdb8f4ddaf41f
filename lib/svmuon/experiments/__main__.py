"""``python -m svmuon.experiments NAME [options]``: run one experiment and write its results file."""

import sys

import svmuon.experiments
from svmuon._cli import dispatch


def main(argv: list[str] | None = None) -> int:
    """Run the experiment named by ``argv[0]`` with the remaining arguments; see ``--help``."""
    return dispatch(svmuon.experiments, "experiment", argv)


if __name__ == "__main__":
    sys.exit(main())
