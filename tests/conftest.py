"""Shared test settings: threads per worker, named tolerances, seeded generators, devices, hypothesis profile."""

from __future__ import annotations

import os


def _threads_per_worker() -> int:
    """CPU threads each test process may use: the cores this process may run on, shared among the
    pytest-xdist workers (``-n 2`` on 2 cores: one each), never more than an ``OMP_NUM_THREADS`` the user set.
    Two workers with a full-size pool each would run four spinning threads on two cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cores // max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
    user = os.environ.get("OMP_NUM_THREADS", "")
    return min(threads, int(user)) if user.isdigit() and int(user) > 0 else threads


# Before torch and NumPy start their pools (OpenMP, MKL and OpenBLAS read these at load time); subprocesses
# started by tests (chapters, command lines) inherit them.
THREADS = _threads_per_worker()
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = str(THREADS)

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

torch.set_num_threads(THREADS)  # in case torch was loaded before this file (by a plugin)
try:
    torch.set_num_interop_threads(1)  # no test runs inter-op parallel work; refused once a pool exists
except RuntimeError:
    pass

# Named tolerances by dtype, for quantities of size ~1 (singular values, spectral distributions, entropies,
# projections) computed by a backward-stable chain (an SVD or eigh, then a few elementwise passes) from matrices
# of size n <= 16 with entries and norms <= ~10. Bound: |error| <= κ · n · u · ‖A‖ with u the unit roundoff
# (1.1e-16 float64, 6.0e-8 float32), n u ‖A‖ the SVD's backward error (Weyl: singular values move by at most
# that) and κ <= 10 the condition of what is tested (the entropy's |log p_min| + 1 for p_min >= 1e-4).
TOL = {
    # bound 10 · 16 · 1.1e-16 · 10 = 1.8e-13 (absolute) and 1.8e-14 (relative); rtol 1e-10 is far above it
    # and far below float32's rounding (6e-8): it catches a silent float32 step in a float64 computation
    torch.float64: {"rtol": 1e-10, "atol": 1e-12},
    # bound 10 · 16 · 6e-8 = 9.6e-6 (relative; atol 1e-5 for values near 0 of matrices of norm ~1); rtol 1e-4
    # is 10x above it and below float16's rounding (4.9e-4) and bfloat16's (3.9e-3): it catches a low-precision step
    torch.float32: {"rtol": 1e-4, "atol": 1e-5},
}

settings.register_profile("ci", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def _restore_torch_globals():
    """Undo what a test (or a library main() it calls, such as an experiment's ``--threads``) changes in
    torch's process-wide settings: the thread count and the default dtype."""
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if torch.get_default_dtype() != dtype:
        torch.set_default_dtype(dtype)


@pytest.fixture
def gen() -> torch.Generator:
    """A CPU generator with a fixed seed, so that every test draws the same matrices on every run."""
    return torch.Generator().manual_seed(20261130)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
