"""Shared test settings: named tolerances, seeded generators, devices, and the hypothesis profile."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# Tolerances by dtype. float64: ~1e3 ulps of headroom over eps = 2.2e-16 for SVD-based chains of a few
# dozen operations; float32: eps = 1.2e-7 with the same headroom.
TOL = {
    torch.float64: {"rtol": 1e-10, "atol": 1e-12},
    torch.float32: {"rtol": 1e-4, "atol": 1e-5},
}

settings.register_profile("ci", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


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
