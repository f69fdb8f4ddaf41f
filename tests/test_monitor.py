"""EntropyMonitor: values against the per-matrix public functions, batching, baselines, bad input, syncs."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

from svmuon.bench.muon_step import count_syncs
from svmuon.spectral import EntropyMonitor, gaussian_baseline, singular_value_entropy
from svmuon.spectral.random_matrix import gaussian_entropy_limit
from conftest import DEVICES

matplotlib.use("Agg")

PAIRS = [(1, 1), (2, 1), (1, 2), (2, 2)]  # (q, power)


def _mats(gen, dtype=torch.float64):
    return {"a": torch.randn(12, 5, generator=gen, dtype=dtype), "b": torch.randn(12, 5, generator=gen, dtype=dtype),
            "wide": torch.randn(4, 9, generator=gen, dtype=dtype),
            "kernel": torch.randn(6, 2, 2, 2, generator=gen, dtype=dtype)}  # read as 6 × 8


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
def test_values_match_singular_value_entropy_per_matrix(gen, dtype, tol):
    """Every (q, power) of every matrix equals singular_value_entropy of that matrix alone; q = 2 with p ∝ σ²
    is computed there from traces without an SVD, an independent route. Tolerances: float64, k · eps-level
    rounding of two SVD-based chains (~1e-14) with headroom; float32, a few ulps of log k ≈ 2 (2.4e-7 each)
    plus the trace route's rounding of ‖WᵀW‖_F² (relative ~1e-6)."""
    mats = _mats(gen, dtype)
    mon = EntropyMonitor(mats, every=1)
    mon.record(0)
    df = mon.frame().set_index("name")
    for name, W in mats.items():
        W2 = W.reshape(W.shape[0], -1)
        for q, P in PAIRS:
            want = float(singular_value_entropy(W2, q=q, power=P))
            assert abs(df.loc[name, f"H_q{q}_p{P}"] - want) < tol, (name, q, P)
            assert df.loc[name, f"erank_q{q}_p{P}"] == pytest.approx(math.exp(df.loc[name, f"H_q{q}_p{P}"]))
    assert df.loc["kernel", "m"] == 6 and df.loc["kernel", "n"] == 8 and (df["status"] == "ok").all()


def test_one_batched_svd_per_shape_and_same_values_as_one_by_one(gen, monkeypatch):
    mats = _mats(gen)
    calls = []
    original = torch.linalg.svdvals
    monkeypatch.setattr(torch.linalg, "svdvals", lambda A, **kw: calls.append(tuple(A.shape)) or original(A, **kw))
    together = EntropyMonitor(mats)
    together.record(0)
    assert sorted(calls) == sorted([(2, 12, 5), (1, 4, 9), (1, 6, 8)])  # a and b share one call
    alone = pd.concat([(lambda m: (m.record(0), m.frame())[1])(EntropyMonitor({k: v})) for k, v in mats.items()])
    cols = [f"H_q{q}_p{P}" for q, P in PAIRS]
    a, b = together.frame().set_index("name")[cols], alone.set_index("name")[cols]
    # batched and single LAPACK calls differ at most by rounding of the SVD: float64 eps · k
    np.testing.assert_allclose(a.loc[b.index].to_numpy(), b.to_numpy(), rtol=0, atol=1e-12)


def test_large_n_baseline_has_the_closed_forms():
    """For p ∝ σ² the Gaussian limit is L_1 = -λ/2 and L_2 = -log(1 + λ) (thm-gaussian-limit), independent of
    the quadrature; p ∝ σ is checked against gaussian_entropy_limit itself. Quadrature accuracy: 1e-9."""
    for m, n in [(64, 64), (256, 64), (32, 128)]:
        lam, k = min(m, n) / max(m, n), min(m, n)
        b = gaussian_baseline(m, n)
        assert b["gauss_q1_p2"] == pytest.approx(math.log(k) - lam / 2, abs=1e-9)
        assert b["gauss_q2_p2"] == pytest.approx(math.log(k) - math.log1p(lam), abs=1e-9)
        assert b["gauss_q1_p1"] == pytest.approx(math.log(k) + gaussian_entropy_limit(lam, q=1, power=1), abs=1e-12)


def test_monte_carlo_baseline_agrees_with_an_independent_numpy_estimate():
    """The exact-shape mean over 200 draws against numpy's own Gaussian matrices and SVD: two independent
    estimates of the same expectation, within 4 combined standard errors (false alarm ~6e-5 per value)."""
    m, n, draws = 24, 10, 200
    b = gaussian_baseline(m, n, draws=draws, seed=3)
    rng = np.random.default_rng(5)
    s = np.linalg.svd(rng.standard_normal((draws, m, n)), compute_uv=False)
    for q, P in PAIRS:
        p = s**P / (s**P).sum(-1, keepdims=True)
        h = -(p * np.log(p)).sum(-1) if q == 1 else -np.log((p**2).sum(-1))
        se = math.hypot(b[f"gauss_mc_se_q{q}_p{P}"], h.std(ddof=1) / math.sqrt(draws))
        assert abs(b[f"gauss_mc_q{q}_p{P}"] - h.mean()) < 4 * se, (q, P)
    mon = EntropyMonitor({"w": torch.ones(m, n)}, baseline_draws=draws, seed=3)
    mon.record(0)
    assert mon.frame()["gauss_mc_q1_p1"].iloc[0] == b["gauss_mc_q1_p1"]  # the monitor's column is this function


def test_step_records_on_the_grid_and_touches_nothing_in_between():
    reads = []
    W = torch.randn(8, 6)
    mon = EntropyMonitor({"w": lambda: reads.append(1) or W}, every=3)
    reads.clear()  # the constructor reads the shape once
    recorded = [mon.step() for _ in range(7)]
    assert recorded == [True, False, False, True, False, False, True] and len(reads) == 3
    assert mon.frame()["step"].tolist() == [0, 3, 6]
    assert count_syncs(lambda: mon.step(7)) == 0  # off the grid: no read-back
    assert count_syncs(lambda: mon.step(9)) == 1  # a record: one transfer to the host


def test_zero_and_non_finite_matrices_are_flagged_not_raised():
    bad = torch.randn(5, 5)
    bad[0, 0] = math.nan
    mon = EntropyMonitor({"ok": torch.randn(5, 5), "zero": torch.zeros(5, 5), "nan": bad})
    mon.record(0)
    df = mon.frame().set_index("name")
    assert df["status"].to_dict() == {"ok": "ok", "zero": "zero", "nan": "non-finite"}
    assert df.loc[["zero", "nan"], "H_q1_p1"].isna().all() and df.loc["ok", "H_q1_p1"] > 0


def test_module_input_csv_and_plot(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3))
    mon = EntropyMonitor(model, every=2, q=1, power=2)
    for step in range(5):
        mon.step(step)
    df = mon.frame()
    assert set(df["name"]) == {"0.weight", "2.weight"} and sorted(set(df["step"])) == [0, 2, 4]
    assert [c for c in df if c.startswith("H_")] == ["H_q1_p2"]
    back = pd.read_csv(mon.to_csv(tmp_path / "sub" / "e.csv"))
    np.testing.assert_allclose(back["H_q1_p2"], df["H_q1_p2"], rtol=1e-12)
    ax = mon.plot(q=1, power=2, by=lambda name: name.split(".")[0])
    assert len(ax.get_lines()) >= 2
    with pytest.raises(ValueError, match="not monitored"):
        mon.plot(q=2, power=2)


@pytest.mark.parametrize("matrices, error, match", [
    ("weights", TypeError, "matrices must be"),
    ({}, ValueError, "at least one"),
    ({1: torch.ones(3, 3)}, TypeError, "names must be strings"),
    ({"v": torch.ones(3)}, ValueError, "at least 2 dimensions"),
    ({"row": torch.ones(1, 5)}, ValueError, "min"),
    ({"int": torch.ones(3, 3, dtype=torch.int64)}, TypeError, "floating"),
    ({"f": lambda: "no"}, TypeError, "callable returning one"),
    ([("a", torch.ones(3, 3)), ("a", torch.ones(3, 3))], ValueError, "twice"),
    ([torch.ones(3, 3)], TypeError, "pairs"),
])
def test_bad_matrices_are_refused(matrices, error, match):
    with pytest.raises(error, match=match):
        EntropyMonitor(matrices)


@pytest.mark.parametrize("kw, error, match", [
    (dict(every=0), ValueError, "every"), (dict(every=2.5), TypeError, "every"),
    (dict(q=(1, 1)), ValueError, "twice"), (dict(q=-1), ValueError, "q"), (dict(power=0), ValueError, "power"),
    (dict(baseline_draws=-1), ValueError, "baseline_draws"), (dict(q=math.inf), ValueError, "finite"),
])
def test_bad_options_are_refused(kw, error, match):
    with pytest.raises(error, match=match):
        EntropyMonitor({"w": torch.ones(3, 3)}, **kw)


def test_bad_steps_and_changed_shapes():
    box = {"W": torch.randn(4, 4)}
    mon = EntropyMonitor({"w": lambda: box["W"]})
    with pytest.raises(ValueError, match="nothing recorded"):
        mon.plot()
    with pytest.raises(ValueError, match=">= 0"):
        mon.step(-1)
    with pytest.raises(TypeError, match="integer"):
        mon.step(1.0)
    box["W"] = torch.randn(4, 5)
    with pytest.raises(ValueError, match="changed shape"):
        mon.record(0)
    with pytest.raises(ValueError, match="min"):
        gaussian_baseline(1, 5)


@pytest.mark.parametrize("device", DEVICES)
def test_device_and_half_precision_follow_the_input(device):
    W = torch.randn(16, 8, device=device)
    mon = EntropyMonitor({"f32": W, "bf16": W.to(torch.bfloat16)})
    mon.record(0)
    df = mon.frame().set_index("name")
    want = float(singular_value_entropy(W.cpu()))
    assert abs(df.loc["f32", "H_q1_p1"] - want) < 2e-5  # float32 rounding of two SVD chains (see above)
    # bf16 rounds each entry by up to 2^-9 relative: the entropy moves by ~1e-3 nats at this size
    assert abs(df.loc["bf16", "H_q1_p1"] - want) < 1e-2
