"""``python -m svmuon.bench NAME [options]``: run one benchmark, print its table, write its JSON result."""

import sys

import svmuon.bench
from svmuon._cli import dispatch

if __name__ == "__main__":
    sys.exit(dispatch(svmuon.bench, "benchmark"))
