"""Smoke tests of the orthogonal-group experiments (orthogonal_rnn, orthogonal_drift) on tiny budgets."""

from __future__ import annotations

import pytest
import torch

from svmuon.experiments import orthogonal_drift, orthogonal_rnn


@pytest.mark.slow  # one epoch of three recurrent trainings on the digits: ~20 s
def test_rnn_one_epoch_keeps_w_orthogonal():
    torch.set_num_threads(1)
    data = orthogonal_rnn.load_sequences()
    assert data["train"][0].shape[1:] == (8, 8)
    for method in ("orthogonal_muon", "param_orthogonal", "adam"):
        r = orthogonal_rnn.train(method, orthogonal_rnn.GRIDS[method][0], 0, data, epochs=1)
        assert len(r["loss"]) == 1 and 0 < r["loss"][0] < 2.31  # below log(10): it learned something
        if method != "adam":  # float32 rounding over ~23 steps; Adam is unconstrained and leaves the group
            assert r["orth_error"][0] <= 1e-5


def test_drift_run_reports_checkpoints():
    r = orthogonal_drift.run_one(torch.float64, "keller_jordan", 0, steps=10)
    assert r["checkpoints"] == [1, 10]
    # the quintic without correction drifts by O(η⁴) per step (≈1e-5 at η = 0.1), far above float64 rounding
    assert all(1e-8 < e[-1] < 1e-3 for e in r["error"].values())
