"""``python -m svmuon.experiments NAME [options]``: run one experiment and write its results file."""

import sys

import svmuon.experiments
from svmuon._cli import dispatch

if __name__ == "__main__":
    sys.exit(dispatch(svmuon.experiments, "experiment"))
