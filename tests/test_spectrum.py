"""Tests of svmuon.spectral.spectrum: singular values and the normalised spectrum p = σ^power / Σσ^power.

Expected values come from matrices built as U diag(s) Vᵀ with chosen s and random orthogonal U, V (QR of a
Gaussian, in float64), so the right answer is the sorted s itself, not the output of another SVD.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import TOL
from helpers import with_spectrum

from svmuon.spectral.spectrum import singular_values, spectral_distribution


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (1, 6), (6, 1)])
def test_singular_values_match_constructed_spectrum(shape, dtype, gen):
    m, n = shape
    k = min(m, n)
    s = torch.linspace(3.0, 0.5, k, dtype=torch.float64)[torch.randperm(k, generator=gen)]
    W = with_spectrum(s, m, n, gen, dtype)
    got = singular_values(W)
    assert got.shape == (k,) and got.dtype == dtype
    # float32: the matrix itself is rounded to float32 (relative 6e-8), SVD is backward stable -> TOL.
    torch.testing.assert_close(got, s.sort(descending=True).values.to(dtype), **TOL[dtype])


def test_singular_values_batched_equals_per_matrix(gen):
    Ws = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64)
    batched = singular_values(Ws)
    assert batched.shape == (2, 3, 4)
    for i in range(2):
        for j in range(3):
            torch.testing.assert_close(batched[i, j], singular_values(Ws[i, j]), **TOL[torch.float64])
    assert bool((batched[..., :-1] >= batched[..., 1:]).all())  # descending


def test_numpy_in_numpy_out(gen):
    W = with_spectrum([2.0, 1.0, 0.25], 3, 4, gen).numpy()
    before = W.copy()
    s = singular_values(W)
    p = spectral_distribution(W, power=2)
    assert isinstance(s, np.ndarray) and s.dtype == np.float64
    # with_spectrum rounds U diag(s) Vᵀ once: Weyl gives |Δσ| <= n u ‖s‖ ~ 1e-15
    np.testing.assert_allclose(s, [2.0, 1.0, 0.25], rtol=1e-12)
    # p = s^2 / Σ s^2 = (4, 1, 1/16) / (81/16): exact rationals.
    np.testing.assert_allclose(p, np.array([64, 16, 1]) / 81, rtol=1e-12)
    np.testing.assert_array_equal(W, before)  # not mutated


@pytest.mark.parametrize("power", [1, 2, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_spectral_distribution_values(power, dtype, gen):
    s = torch.tensor([4.0, 2.0, 1.0, 0.5], dtype=torch.float64)
    W = with_spectrum(s, 6, 4, gen, dtype)
    p = spectral_distribution(W, power=power)
    expected = s**power / (s**power).sum()
    assert p.dtype == dtype
    torch.testing.assert_close(p, expected.to(dtype), **TOL[dtype])
    torch.testing.assert_close(p.sum(-1), torch.tensor(1.0, dtype=dtype), **TOL[dtype])


def test_rank_deficient_matrix_has_exact_zeros(gen):
    # rank 2 in a 5 x 4 matrix: the SVD returns two singular values ~1e-16 that are rounding noise.
    W = with_spectrum([3.0, 1.0, 0.0, 0.0], 5, 4, gen)
    p = spectral_distribution(W)
    torch.testing.assert_close(p, torch.tensor([0.75, 0.25, 0.0, 0.0], dtype=torch.float64), rtol=0, atol=1e-14)
    assert int((p == 0).sum()) == 2 == 4 - int(torch.linalg.matrix_rank(W))
    raw = spectral_distribution(W, rtol=0.0)  # keeps the noise: tiny, but not thresholded away
    assert float(raw[2:].max()) < 1e-14


def test_scaling_does_not_overflow():
    # σ = 1e200 would overflow in σ^2 without dividing by σ_1 first.
    W = torch.diag(torch.tensor([1e200, 5e199], dtype=torch.float64))
    torch.testing.assert_close(spectral_distribution(W, power=2), torch.tensor([0.8, 0.2], dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_computed_in_float32(dtype, gen):
    W = torch.randn(6, 4, generator=gen).to(dtype)
    s = singular_values(W)
    assert s.dtype == dtype
    # Same input values in float32; the only extra error is the final rounding to the half dtype
    # (relative 2^-8 for bfloat16, 2^-11 for float16).
    ref = torch.linalg.svdvals(W.float())
    rtol = 2**-7 if dtype == torch.bfloat16 else 2**-10
    torch.testing.assert_close(s.float(), ref, rtol=rtol, atol=0)
    assert spectral_distribution(W).dtype == dtype


BAD_MATRICES = [
    ([[1.0, 2.0]], TypeError, "W"),  # a list, not a tensor
    (torch.ones(3, 3, dtype=torch.int64), TypeError, "W"),
    (torch.ones(3, 3, dtype=torch.bool), TypeError, "W"),
    (torch.ones(3, 3, dtype=torch.complex64), TypeError, "complex"),
    (np.ones((3, 3), dtype=np.int32), TypeError, "W"),
    (np.ones((3, 3), dtype=np.complex128), TypeError, "complex"),
    (torch.ones(3), ValueError, "at least 2"),
    (torch.tensor(1.0), ValueError, "at least 2"),
    (torch.ones(0, 3), ValueError, "empty"),
    (torch.ones(2, 3, 0), ValueError, "empty"),
    (torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), ValueError, "NaN"),
    (torch.tensor([[1.0, float("inf")], [0.0, 1.0]]), ValueError, "finite"),
]


@pytest.mark.parametrize("W, error, words", BAD_MATRICES)
@pytest.mark.parametrize("fn", [singular_values, spectral_distribution])
def test_bad_matrices_raise(fn, W, error, words):
    with pytest.raises(error, match=words):
        fn(W)


@pytest.mark.parametrize("W", [torch.zeros(3, 4), torch.stack([torch.eye(3), torch.zeros(3, 3)])])
def test_zero_matrix_entropy_is_undefined(W):
    with pytest.raises(ValueError, match="zero matrix.*undefined"):
        spectral_distribution(W)
    singular_values(W)  # the singular values themselves are fine: all zeros


@pytest.mark.parametrize("power, error", [(0, ValueError), (-1, ValueError), (float("nan"), ValueError),
                                          (float("inf"), ValueError), ("2", TypeError), (True, TypeError)])
def test_bad_power_raises(power, error):
    with pytest.raises(error, match="power"):
        spectral_distribution(torch.eye(3), power=power)


@pytest.mark.parametrize("rtol, error", [(-0.1, ValueError), (1.0, ValueError), ("0", TypeError)])
def test_bad_rtol_raises(rtol, error):
    with pytest.raises(error, match="rtol"):
        spectral_distribution(torch.eye(3), rtol=rtol)


@pytest.mark.cuda
def test_cuda_matches_cpu(gen):
    W = torch.randn(3, 8, 5, generator=gen, dtype=torch.float64)
    for dtype in (torch.float32, torch.float64):
        got = spectral_distribution(W.to("cuda", dtype), power=2)
        assert got.device.type == "cuda" and got.dtype == dtype
        torch.testing.assert_close(got.cpu(), spectral_distribution(W.to(dtype), power=2), **TOL[dtype])
