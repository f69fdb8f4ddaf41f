"""Tests of svmuon.spectral.simplex.sample_simplex: uniform points on Δ^{n-1} from normalised Exp(1) draws.

Independent routes: the exact moments of the flat Dirichlet distribution, the Beta(1, n-1) marginal
(scipy.stats KS test), the area of a sub-triangle, and E[H] = ψ(n+1) - ψ(2) (scipy.special.digamma).
Seeds are fixed, so every statistical test below is deterministic; its threshold is still chosen so that a
correct sampler passes with overwhelming probability for any seed (4 standard errors, or p-value > 1e-3).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch

from svmuon.spectral.simplex import sample_simplex

N_DRAWS = 40_000


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 2, 5, 64])
def test_points_lie_on_the_simplex(n, dtype, gen):
    p = sample_simplex(n, 100, generator=gen, dtype=dtype)
    assert p.shape == (100, n) and p.dtype == dtype and p.device.type == "cpu"
    assert bool((p >= 0).all())
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(p.sum(-1), torch.ones(100, dtype=dtype), rtol=0, atol=4 * n * eps)  # n additions


def test_n_equal_one_and_size_zero():
    assert torch.equal(sample_simplex(1, 3), torch.ones(3, 1, dtype=torch.float64))
    assert sample_simplex(4, 0).shape == (0, 4)


def test_generator_makes_draws_reproducible():
    a = sample_simplex(5, 10, generator=torch.Generator().manual_seed(7))
    b = sample_simplex(5, 10, generator=torch.Generator().manual_seed(7))
    c = sample_simplex(5, 10, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_moments_match_flat_dirichlet(gen):
    n = 6
    p = sample_simplex(n, N_DRAWS, generator=gen).numpy()
    # Dirichlet(1,...,1): E p_i = 1/n, Var p_i = (n-1) / (n^2 (n+1)), Cov(p_i, p_j) = -1 / (n^2 (n+1)).
    var = (n - 1) / (n**2 * (n + 1))
    se_mean = math.sqrt(var / N_DRAWS)
    assert np.all(np.abs(p.mean(0) - 1 / n) < 4 * se_mean)
    c = p - p.mean(0)
    # the sample (co)variance is a mean of the products c_i c_j: its SE is their std / sqrt(N).
    for (i, j), exact in (((0, 0), var), ((0, 1), -1 / (n**2 * (n + 1)))):
        prod = c[:, i] * c[:, j]
        assert abs(prod.mean() - exact) < 4 * prod.std() / math.sqrt(N_DRAWS), (i, j)


@pytest.mark.parametrize("n", [2, 3, 10])
def test_marginals_are_beta_one_n_minus_one(n, gen):
    p = sample_simplex(n, N_DRAWS, generator=gen).numpy()
    for i in (0, n - 1):
        ks = scipy.stats.kstest(p[:, i], scipy.stats.beta(1, n - 1).cdf)
        assert ks.pvalue > 1e-3, (n, i, ks)


def test_wrong_sampler_is_rejected_by_the_same_test(gen):
    # The KS test above has power: normalised Uniform(0,1) draws are not uniform on the simplex.
    n = 3
    u = torch.rand(N_DRAWS, n, generator=gen, dtype=torch.float64)
    wrong = (u / u.sum(-1, keepdim=True)).numpy()
    assert scipy.stats.kstest(wrong[:, 0], scipy.stats.beta(1, n - 1).cdf).pvalue < 1e-10


def test_uniform_on_the_triangle(gen):
    # n = 3: the corner {p_1 > 1/2} is a triangle with 1/4 of the area of Δ^2, so its probability is 1/4.
    p = sample_simplex(3, N_DRAWS, generator=gen)
    frac = float((p[:, 0] > 0.5).double().mean())
    assert abs(frac - 0.25) < 4 * math.sqrt(0.25 * 0.75 / N_DRAWS)


def test_expected_entropy_is_digamma_difference(gen):
    # For a flat Dirichlet, E[-p_i log p_i] gives E[H] = ψ(n+1) - ψ(2) exactly (Beta(1, n-1) marginal).
    n = 50
    p = sample_simplex(n, 20_000, generator=gen)
    h = -(torch.special.xlogy(p, p)).sum(-1)
    exact = scipy.special.digamma(n + 1) - scipy.special.digamma(2)
    se = float(h.std()) / math.sqrt(h.numel())
    assert abs(float(h.mean()) - exact) < 4 * se


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(n=0, size=3), ValueError, "n must be an integer >= 1"),
    (dict(n=-2, size=3), ValueError, "n must"),
    (dict(n=2.5, size=3), TypeError, "n must"),
    (dict(n=True, size=3), TypeError, "n must"),
    (dict(n=3, size=-1), ValueError, "size must"),
    (dict(n=3, size=2.0), TypeError, "size must"),
    (dict(n=3, size=2, dtype=torch.float16), TypeError, "dtype"),
    (dict(n=3, size=2, dtype=torch.int64), TypeError, "dtype"),
    (dict(n=3, size=2, generator=np.random.default_rng(0)), TypeError, "generator"),
])
def test_bad_arguments_raise(kwargs, error, words):
    with pytest.raises(error, match=words):
        sample_simplex(**kwargs)


@pytest.mark.cuda
def test_cuda_device_and_generator():
    p = sample_simplex(4, 1000, device="cuda", dtype=torch.float32)
    assert p.device.type == "cuda" and p.dtype == torch.float32
    # float32 sum of normalised entries: k u32 = a few 1e-7
    torch.testing.assert_close(p.sum(-1), torch.ones(1000, device="cuda"), rtol=0, atol=1e-6)
    g = torch.Generator(device="cuda").manual_seed(3)
    q = sample_simplex(4, 10, generator=g)
    assert q.device.type == "cuda"
    cpu = sample_simplex(4, 10, generator=torch.Generator().manual_seed(3), device="cuda")
    assert cpu.device.type == "cuda"


@pytest.mark.parametrize("device", ["foo", 3.5, "cpu:x"])
def test_bad_device_is_a_value_error_naming_device(device):
    # regression: device='foo' raised torch's raw RuntimeError
    with pytest.raises(ValueError, match="device"):
        sample_simplex(3, 2, device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error for a machine without CUDA")
def test_unavailable_cuda_device_is_a_value_error():
    with pytest.raises(ValueError, match="device"):
        sample_simplex(3, 2, device="cuda:0")


@pytest.mark.parametrize("n,size", [(10**400, 2), (2, 10**30), (2**40, 2**40)])
def test_too_many_entries_is_a_clear_error(n, size):
    # regression: n = 10**400 raised torch's "Overflow when unpacking long long" with a C++ stack trace
    with pytest.raises(ValueError, match=r"n·size must be at most 2\^63 - 1"):
        sample_simplex(n, size)
