"""Tests of svmuon.spectral.report: the per-layer spectral report on modules whose spectra are known.

Weights are built as U diag(s) Vᵀ with chosen s, so the expected entropies are computed here directly from s
with NumPy (an independent route: no SVD involved).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import orthonormal, with_spectrum
from safetensors.torch import save_file

from svmuon.spectral.random_matrix import gaussian_entropy_limit
from svmuon.spectral.report import plot_spectral_report, spectral_report

# float64 weights: SVD of a well-conditioned 12x8 matrix is accurate to ~1e-14; 1e-10 leaves headroom.
ATOL64 = 1e-10
# float32 weights: singular values carry ~1e-7 relative error; entropies to ~1e-6 nats.
ATOL32 = 1e-5


def _renyi(s, q, power):
    p = np.asarray(s, float) ** power
    p = p / p.sum()
    return float(-(p * np.log(p)).sum()) if q == 1 else float(np.log((p**q).sum()) / (1 - q))


S1 = np.array([5.0, 3.0, 2.0, 1.0, 1.0, 0.5, 0.25, 0.125])
S2 = np.linspace(1.0, 2.0, 6)


def _module():
    net = torch.nn.Sequential(torch.nn.Linear(8, 12), torch.nn.ReLU(), torch.nn.Linear(12, 6, bias=False),
                              torch.nn.Conv2d(2, 3, kernel_size=2)).double()
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        net[0].weight.copy_(with_spectrum(S1, 12, 8, gen))  # (12, 8): k = 8
        net[2].weight.copy_(with_spectrum(S2, 6, 12, gen))  # (6, 12): k = 6
        net[3].weight.copy_(with_spectrum([3.0, 2.0, 1.0], 3, 8, gen).reshape(3, 2, 2, 2))
    return net


def test_known_spectra_give_known_entropies():
    df = spectral_report(_module())
    assert list(df["name"]) == ["0.weight", "2.weight", "3.weight"]
    for row, s in zip(df.itertuples(), [S1, S2, np.array([3.0, 2.0, 1.0])]):
        k = len(s)
        for q in (1, 2):
            for power in (1, 2):
                tag = f"q{q}_p{power}"
                H = _renyi(s, q, power)
                assert getattr(row, f"H_{tag}") == pytest.approx(H, abs=ATOL64)
                assert getattr(row, f"Hnorm_{tag}") == pytest.approx(H / math.log(k), abs=ATOL64)
                assert getattr(row, f"erank_{tag}") == pytest.approx(math.exp(H), rel=ATOL64)
                assert getattr(row, f"gap_logk_{tag}") == pytest.approx(math.log(k) - H, abs=ATOL64)
                mf = math.log(k) - (1 - np.euler_gamma) if q == 1 else math.log(k / 2)  # eq-mean-field, q = 2
                assert getattr(row, f"gap_mf_{tag}") == pytest.approx(H - mf, abs=ATOL64)
                lam = row.k / max(row.m, row.n)
                # default rel 1e-6: the report calls the same limit; the sum is rounded once
                assert getattr(row, f"gauss_{tag}") == pytest.approx(math.log(k) + gaussian_entropy_limit(lam, q=q, power=power))
        assert row.stable_rank == pytest.approx((s**2).sum() / s.max() ** 2, rel=ATOL64)


def test_conv_flattened_and_vectors_skipped():
    df = spectral_report(_module())
    conv = df.set_index("name").loc["3.weight"]
    assert conv["shape"] == (3, 2, 2, 2) and (conv["m"], conv["n"]) == (3, 8) and bool(conv["flattened"])
    assert not df.set_index("name").loc["0.weight", "flattened"]
    assert set(df.attrs["skipped"]) == {"0.bias", "3.bias"}
    assert "1-D" in df.attrs["skipped"]["0.bias"]


def test_orthogonal_is_maximal_and_invariances():
    Q = orthonormal(16, 16, torch.Generator().manual_seed(3))
    df = spectral_report({"Q": Q, "Qs": 7.5 * Q.T, "Q32": Q.float()})
    assert np.allclose(df["gap_logk_q1_p1"].iloc[:2], 0, atol=ATOL64)
    assert np.allclose(df["gap_logk_q2_p2"].iloc[:2], 0, atol=ATOL64)
    assert np.allclose(df["gap_logk_q1_p1"].iloc[2], 0, atol=ATOL32)
    assert np.allclose(df["stable_rank"].iloc[:2], 16, rtol=ATOL64)


def test_state_dict_safetensors_and_torch_file_agree(tmp_path):
    net = _module()
    ref = spectral_report(net)
    sd = {k: v.detach().clone().contiguous() for k, v in net.state_dict().items()}
    save_file(sd, tmp_path / "w.safetensors")
    torch.save(sd, tmp_path / "w.pt")
    for src in (sd, tmp_path / "w.safetensors", str(tmp_path / "w.pt")):
        df = spectral_report(src)
        pd.testing.assert_frame_equal(df.drop(columns="shape"), ref.drop(columns="shape"))


def test_options_and_integer_buffers():
    W = with_spectrum(S1, 12, 8, torch.Generator().manual_seed(0))
    df = spectral_report({"W": W, "ids": torch.arange(6).reshape(2, 3), "row": torch.ones(1, 5)}, q=0.5, power=2)
    assert [c for c in df.columns if c.startswith("H_")] == ["H_q0.5_p2"]
    assert df["H_q0.5_p2"].iloc[0] == pytest.approx(_renyi(S1, 0.5, 2), abs=ATOL64)
    assert set(df.attrs["skipped"]) == {"ids", "row"}


def test_input_not_mutated():
    net = _module()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    spectral_report(net)
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k])


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="no weight matrix"):
        spectral_report(torch.nn.LayerNorm(4))
    with pytest.raises(ValueError, match="no weight matrix"):
        spectral_report({})
    bad = torch.nn.Linear(4, 4)
    with torch.no_grad():
        bad.weight[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"module Linear: parameter 'weight'.*1 NaN"):
        spectral_report(bad)
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        spectral_report(tmp_path / "missing.safetensors")
    with pytest.raises(TypeError, match="entry 'w'"):
        spectral_report({"w": [[1.0, 2.0], [3.0, 4.0]]})
    with pytest.raises(TypeError, match="source must be"):
        spectral_report(42)
    with pytest.raises(ValueError, match="power"):
        spectral_report({"w": torch.eye(3)}, power=0)
    torch.save([torch.eye(3)], tmp_path / "list.pt")
    with pytest.raises(TypeError, match="list.pt"):
        spectral_report(tmp_path / "list.pt")


def test_plot(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    df = spectral_report(_module())
    ax = plot_spectral_report(df, q=1, power=2)
    assert len(ax.lines) == 4
    with pytest.raises(KeyError, match="H_q3_p1"):
        plot_spectral_report(df, q=3)


def test_bad_input_regressions():
    # reviewer probe: an empty matrix hit reshape's RuntimeError, power=1e300 an OverflowError deep in the
    # Gaussian reference, q=None "'NoneType' object is not iterable"
    w = {"w": torch.eye(3)}
    for empty in (torch.empty(0, 3), torch.empty(3, 0), torch.empty(2, 0, 3)):
        with pytest.raises(ValueError, match="parameter 'w' is an empty matrix"):
            spectral_report({"w": empty})
    with pytest.raises(ValueError, match="power must be at most"):
        spectral_report(w, power=1e300)
    with pytest.raises(ValueError, match=r"q·power must be at most.*q=1001"):
        spectral_report(w, q=1001, power=1)
    with pytest.raises(ValueError, match="q must hold finite"):
        spectral_report(w, q=10**400)
    for bad in (None, "ab", [1, "a"], {1: 2}):
        with pytest.raises(TypeError, match="q must be a real number or a sequence"):
            spectral_report(w, q=bad)
    with pytest.raises(TypeError, match="power must be a real number or a sequence"):
        spectral_report(w, power=None)
    assert spectral_report(w, q=np.array([1.0, 2.0]), power=2).shape[0] == 1  # arrays are sequences of numbers


def test_close_orders_get_their_own_columns_and_repeats_are_refused():
    # regression: q=(2, 2.0000001) made one column "q2" holding the second order's values only.
    # Expected values: renyi_entropy of the same spectrum, computed here directly.
    from svmuon.spectral.entropy import renyi_entropy
    from svmuon.spectral.spectrum import spectral_distribution

    W = torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64))
    df = spectral_report({"w": W}, q=(2, 2.0000001), power=1)
    p = spectral_distribution(W, 1)
    assert df.loc[0, "H_q2_p1"] == pytest.approx(float(renyi_entropy(p, 2)), abs=1e-14)
    assert df.loc[0, "H_q2.0000001_p1"] == pytest.approx(float(renyi_entropy(p, 2.0000001)), abs=1e-14)
    assert df.loc[0, "H_q2_p1"] != df.loc[0, "H_q2.0000001_p1"]
    assert plot_spectral_report(df, q=2.0000001, power=1) is not None
    for q in ((1, 1.0), (2, 3, 2)):
        with pytest.raises(ValueError, match="q must not hold the same value twice"):
            spectral_report({"w": W}, q=q)
    with pytest.raises(ValueError, match="power must not hold the same value twice"):
        spectral_report({"w": W}, power=(2, 2))


# ------------------------------------------------------------------ issue 19: edge cases of the report

def test_float32_weights_whose_top_singular_value_overflows():
    """Finite float32 weights near the largest float (σ_1 ~ 1e39 overflows float32) raised "p must be finite";
    singular_value_entropy handled the same matrix. Expected: NumPy's float64 SVD of the same entries (float64
    holds σ_1), entropies from those singular values; float32 SVD accuracy, ATOL32."""
    rng = np.random.default_rng(3)
    W64 = rng.uniform(0.5, 1.0, size=(6, 4)) * 3e38
    W = torch.tensor(W64, dtype=torch.float32)
    s = np.linalg.svd(W.double().numpy(), compute_uv=False)
    assert s[0] > np.finfo(np.float32).max  # the case: σ_1 beyond float32
    row = spectral_report({"big": W}).iloc[0]
    for q in (1, 2):
        for power in (1, 2):
            assert row[f"H_q{q}_p{power}"] == pytest.approx(_renyi(s, q, power), abs=ATOL32)
    assert row["stable_rank"] == pytest.approx(float((s**2).sum() / s[0] ** 2), rel=ATOL32)


def test_a_meta_device_model_is_named():
    with pytest.raises(ValueError, match="'weight'.*meta device"):
        spectral_report(torch.nn.Linear(4, 4, device="meta"))


@pytest.mark.parametrize("suffix", [".safetensors", ".SAFETENSORS", ".SafeTensors"])
def test_safetensors_files_by_any_case_and_a_garbage_one_is_named(tmp_path, suffix):
    """A garbage .safetensors raised SafetensorError without the file name; .SAFETENSORS went to torch.load."""
    good = tmp_path / f"w{suffix}"
    save_file({"w": with_spectrum(S1, 12, 8, torch.Generator().manual_seed(0)).float()}, str(good))
    assert spectral_report(good)["H_q1_p1"].iloc[0] == pytest.approx(_renyi(S1, 1, 1), abs=ATOL32)
    bad = tmp_path / f"bad{suffix}"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match=rf"bad{suffix}.*not a readable safetensors file"):
        spectral_report(bad)
