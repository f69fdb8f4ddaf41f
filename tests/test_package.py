"""The public API: every exported name resolves, imports stay lazy, the command-line entry points answer."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import svmuon

PACKAGES = ["svmuon", "svmuon.spectral", "svmuon.orthogonal", "svmuon.optim"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_export_resolves(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        obj = getattr(module, name)
        assert obj is not None, f"{package}.{name}"
        if callable(obj) and name != "__version__":
            assert obj.__doc__, f"{package}.{name} has no docstring"


def test_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        svmuon.no_such_name  # noqa: B018


@pytest.mark.slow  # a fresh interpreter imports torch: 5-10 s on the shared machine
def test_import_is_lazy():
    # `import svmuon` and `from svmuon import Muon` pull in none of the heavy modules (the import-time budget,
    # 0.3 s over torch, is measured by `python -m svmuon.bench muon-step`)
    heavy = ("pandas", "sympy", "cvxpy", "matplotlib", "scipy", "torch.distributed.tensor")
    code = f"import sys, svmuon; from svmuon import Muon, OrthogonalMuon; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow  # two fresh interpreters per entry point, each importing torch
@pytest.mark.parametrize("entry", ["svmuon.bench", "svmuon.experiments"])
def test_entry_points_list_their_commands(entry):
    out = subprocess.run([sys.executable, "-m", entry, "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "python -m" in out.stdout
    bad = subprocess.run([sys.executable, "-m", entry, "no-such-thing"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown" in bad.stderr
