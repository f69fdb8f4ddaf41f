"""Smoke test of ``python -m svmuon.experiments stiefel-digits`` on a one-epoch budget."""

from __future__ import annotations

import pytest
import torch

from svmuon.experiments import stiefel_digits


@pytest.mark.slow  # ~10 s: the Newton solver on rank-deficient gradients (see the chapter)
def test_one_epoch_keeps_the_weights_orthonormal():
    torch.set_num_threads(1)
    data = stiefel_digits.load_digits_split()
    assert data["train"][0].shape[1] == 64
    for method in ("stiefel_muon", "stiefel_muon_rank", "param_orthogonal", "adam"):
        r = stiefel_digits.train(method, stiefel_digits.GRIDS[method][1], 0, data, epochs=1)
        assert len(r["loss"]) == 1 and 0 < r["loss"][0] < 2.31  # below log(10): it learned something
        assert r["step_ms_median"] > 0
        if method != "adam":  # float32 rounding over ~17 steps; Adam is unconstrained and leaves the manifold
            assert r["orth_error"][0] <= 1e-5
