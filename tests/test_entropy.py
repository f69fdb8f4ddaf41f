"""Tests of svmuon.spectral.entropy: Shannon and Rényi entropies, singular-value entropy, effective ranks.

Independent routes: scipy.stats.entropy (Shannon), mpmath at 50 digits (Rényi for every q), spectra built
as U diag(s) Vᵀ (singular-value entropy), torch.linalg norms and matrix_rank (the classical ranks).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import scipy.stats
import torch
from conftest import TOL
from hypothesis import given
from hypothesis import strategies as st

from svmuon.spectral.entropy import (
    effective_rank,
    renyi_entropy,
    shannon_entropy,
    singular_value_entropy,
    stable_rank,
)

mpmath.mp.dps = 50


def orthogonal(n: int, gen: torch.Generator) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    return q


def with_spectrum(s, m: int, n: int, gen: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """U diag(s) Vᵀ with random orthogonal U, V: singular values exactly s (to float64 rounding)."""
    s = torch.as_tensor(s, dtype=torch.float64)
    k = min(m, n)
    D = torch.zeros(m, n, dtype=torch.float64)
    D[range(k), range(k)] = s
    return (orthogonal(m, gen) @ D @ orthogonal(n, gen).T).to(dtype)


def mp_renyi(p, q) -> float:
    """Rényi entropy of p at 50 significant digits with mpmath (q = 1: Shannon; q = inf: min-entropy)."""
    p = [mpmath.mpf(float(x)) for x in p]
    s = mpmath.fsum(p)
    p = [x / s for x in p if x > 0]
    if q == 1:
        return float(-mpmath.fsum(x * mpmath.log(x) for x in p))
    if q == math.inf:
        return float(-mpmath.log(max(p)))
    if q == 0:
        return float(mpmath.log(len(p)))
    q = mpmath.mpf(q)
    return float(mpmath.log(mpmath.fsum(x**q for x in p)) / (1 - q))


def dirichlet(k: int, rng: np.random.Generator, zeros: int = 0) -> np.ndarray:
    p = rng.exponential(size=k)
    p[:zeros] = 0.0
    return p / p.sum()


# ---------------------------------------------------------------- Shannon and Rényi against references


@pytest.mark.parametrize("zeros", [0, 3])
def test_shannon_matches_scipy(zeros):
    rng = np.random.default_rng(1)
    p = np.stack([dirichlet(10, rng, zeros) for _ in range(4)])
    got = shannon_entropy(p)
    assert isinstance(got, np.ndarray) and got.shape == (4,)
    # both are float64 sums of 10 terms: agreement to ~1e3 ulps.
    np.testing.assert_allclose(got, scipy.stats.entropy(p, axis=1), rtol=1e-12)
    np.testing.assert_allclose(shannon_entropy(p.T, dim=0), got, rtol=1e-14)


@pytest.mark.parametrize("q", [0.0, 1e-3, 0.3, 0.5, 0.75, 1 - 1e-9, 1.0, 1 + 1e-9, 1.3, 1.5, 2.0, 3.7, 50.0, 1e6, math.inf])
def test_renyi_matches_mpmath(q):
    rng = np.random.default_rng(2)
    for zeros in (0, 2):
        p = dirichlet(12, rng, zeros)
        got = float(renyi_entropy(torch.from_numpy(p), q))
        # float64 with no cancellation in either branch: relative error a few eps * log k; 1e-12 is ~5000 eps.
        assert got == pytest.approx(mp_renyi(p, q), rel=1e-12, abs=1e-14), (q, zeros)


def test_renyi_special_orders():
    p = torch.tensor([0.5, 0.25, 0.25, 0.0, 0.0], dtype=torch.float64)
    assert float(renyi_entropy(p, 0)) == pytest.approx(math.log(3), rel=1e-15)
    assert float(renyi_entropy(p, math.inf)) == pytest.approx(math.log(2), rel=1e-15)
    assert float(renyi_entropy(p, 2)) == pytest.approx(-math.log(0.375), rel=1e-15)  # Σp² = 3/8
    assert float(renyi_entropy(p, 1)) == pytest.approx(1.5 * math.log(2), rel=1e-15)
    # q = 1e300 must not overflow; it equals the min-entropy to ~q^-1.
    assert float(renyi_entropy(p, 1e300)) == pytest.approx(math.log(2), rel=1e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_continuity_at_q_equal_one(dtype):
    p = torch.from_numpy(dirichlet(20, np.random.default_rng(3))).to(dtype)
    h1 = float(renyi_entropy(p, 1.0))
    # dH_q/dq at q = 1 is -Var_p(log p) / 2 (the derivative of the cumulant generating function).
    lp = np.log(p.double().numpy())
    slope = -0.5 * (np.sum(p.double().numpy() * lp**2) - np.sum(p.double().numpy() * lp) ** 2)
    eps = torch.finfo(dtype).eps
    for delta in (1e-2, 1e-4, 1e-6, 1e-8, 1e-10, 1e-12, 1e-14):
        for sign in (1, -1):
            hq = float(renyi_entropy(p, 1 + sign * delta))
            # |H_q - H_1 - slope*(q-1)| <= O(δ²) (second derivative of size ~1 here) + rounding (~50 eps).
            assert abs(hq - h1 - slope * sign * delta) <= 2 * delta**2 + 50 * eps, (delta, sign)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_and_batch(dtype):
    p = torch.from_numpy(np.stack([dirichlet(7, np.random.default_rng(s)) for s in range(6)])).to(dtype).reshape(2, 3, 7)
    for q in (0.5, 1.0, 2.0, math.inf):
        got = renyi_entropy(p, q)
        assert got.shape == (2, 3) and got.dtype == dtype
        for i in range(2):
            for j in range(3):
                torch.testing.assert_close(got[i, j], renyi_entropy(p[i, j], q), **TOL[dtype])


def test_half_precision_distribution():
    p = torch.tensor([0.5, 0.25, 0.25], dtype=torch.bfloat16)
    h = renyi_entropy(p, 2)
    assert h.dtype == torch.bfloat16
    # computed in float32, then rounded to bfloat16 (relative 2^-8).
    assert float(h) == pytest.approx(-math.log(0.375), rel=2**-8)


# ---------------------------------------------------------------- properties


distributions = st.integers(1, 12).flatmap(
    lambda k: st.lists(st.floats(0.0, 1.0), min_size=k, max_size=k).filter(lambda w: sum(w) > 1e-3)
)


@given(distributions, st.floats(0.0, 20.0))
def test_bounds_zero_to_log_k(w, q):
    p = torch.tensor(w, dtype=torch.float64)
    p = p / p.sum()
    h = float(renyi_entropy(p, q))
    # bounds hold exactly in exact arithmetic; 1e-12 covers float64 rounding of log and the sums.
    assert -1e-12 <= h <= math.log(len(w)) + 1e-12


@given(distributions)
def test_non_increasing_in_q(w):
    p = torch.tensor(w, dtype=torch.float64)
    p = p / p.sum()
    qs = [0.0, 0.25, 0.5, 0.9, 1 - 1e-7, 1.0, 1 + 1e-7, 1.1, 2.0, 3.0, 10.0, 100.0, math.inf]
    hs = [float(renyi_entropy(p, q)) for q in qs]
    for a, b in zip(hs, hs[1:]):
        assert b <= a + 1e-12  # monotone up to float64 rounding


@pytest.mark.parametrize("q", [0.0, 0.5, 1.0, 2.0, math.inf])
@pytest.mark.parametrize("k", [1, 2, 7])
def test_equality_cases(q, k):
    uniform = torch.full((k,), 1.0 / k, dtype=torch.float64)
    one_hot = torch.zeros(k, dtype=torch.float64)
    one_hot[-1] = 1.0
    assert float(renyi_entropy(uniform, q)) == pytest.approx(math.log(k), abs=1e-14)
    assert float(renyi_entropy(one_hot, q)) == pytest.approx(0.0, abs=1e-15)


spectra = st.lists(st.floats(0.05, 20.0), min_size=3, max_size=3)


@given(spectra, st.sampled_from([0.0, 0.5, 1.0, 2.0, math.inf]), st.sampled_from([1, 2]), st.floats(1e-3, 1e3),
       st.integers(0, 2**31 - 1))
def test_singular_value_entropy_invariances(s, q, power, c, seed):
    gen = torch.Generator().manual_seed(seed)
    W = with_spectrum(s, 4, 3, gen)
    h = singular_value_entropy(W, q, power)
    p = np.array(s) ** power
    assert float(h) == pytest.approx(mp_renyi(p, q), rel=1e-10, abs=1e-12)  # hand-computed spectrum
    for V in (orthogonal(4, gen) @ W @ orthogonal(3, gen), c * W, W.T):
        # orthogonal transforms, positive scaling and transposition keep the spectrum up to rounding.
        torch.testing.assert_close(singular_value_entropy(V, q, power), h, rtol=1e-10, atol=1e-12)


def test_singular_value_entropy_batched_equals_per_matrix(gen):
    W = torch.randn(3, 2, 6, 4, generator=gen, dtype=torch.float64)
    for q, power in [(1.0, 1), (2.0, 2), (math.inf, 1)]:
        h = singular_value_entropy(W, q, power)
        assert h.shape == (3, 2)
        for i in range(3):
            for j in range(2):
                torch.testing.assert_close(h[i, j], singular_value_entropy(W[i, j], q, power), **TOL[torch.float64])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_singular_value_entropy_normalize(dtype, gen):
    W = with_spectrum([2.0, 2.0, 2.0, 2.0], 5, 4, gen, dtype)  # 2 x (orthonormal columns): maximum entropy
    out = singular_value_entropy(W, normalize=True)
    assert out.dtype == dtype
    torch.testing.assert_close(out, torch.tensor(1.0, dtype=dtype), **TOL[dtype])
    R = with_spectrum([1.0, 0.0, 0.0, 0.0], 5, 4, gen, dtype)  # rank one: minimum entropy
    torch.testing.assert_close(singular_value_entropy(R, normalize=True), torch.tensor(0.0, dtype=dtype), **TOL[dtype])
    with pytest.raises(ValueError, match="normalize=True needs min"):
        singular_value_entropy(torch.ones(1, 5), normalize=True)
    assert float(singular_value_entropy(torch.ones(1, 5))) == 0.0  # without normalize k = 1 is fine


# ---------------------------------------------------------------- effective ranks


def test_effective_rank_relatives(gen):
    W = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    s = torch.linalg.svdvals(W)
    fro2 = torch.linalg.matrix_norm(W, "fro") ** 2
    spec = torch.linalg.matrix_norm(W, 2)
    nuc = torch.linalg.matrix_norm(W, "nuc")
    rtol = dict(rtol=1e-12, atol=0)  # each side is a few float64 operations on the same SVD
    torch.testing.assert_close(effective_rank(W, 2, 2), (s**2).sum() ** 2 / (s**4).sum(), **rtol)
    torch.testing.assert_close(effective_rank(W, math.inf, 2), fro2 / spec**2, **rtol)
    torch.testing.assert_close(stable_rank(W), fro2 / spec**2, **rtol)
    torch.testing.assert_close(effective_rank(W, math.inf, 1), nuc / spec, **rtol)
    p = (s / s.sum()).numpy()
    assert float(effective_rank(W)) == pytest.approx(math.exp(scipy.stats.entropy(p)), rel=1e-12)  # erank
    R = with_spectrum([3.0, 2.0, 1.0, 0.0, 0.0], 7, 5, gen)
    assert float(effective_rank(R, 0)) == pytest.approx(float(torch.linalg.matrix_rank(R)), abs=1e-12) == 3.0


def test_stable_rank_batched_and_numpy(gen):
    W = torch.randn(4, 3, 6, generator=gen, dtype=torch.float32)
    sr = stable_rank(W)
    assert sr.shape == (4,) and sr.dtype == torch.float32
    # float32 SVD: ~1e-6 relative; TOL[float32] has 100x headroom.
    torch.testing.assert_close(sr, effective_rank(W, math.inf, 2), **TOL[torch.float32])
    out = stable_rank(W.double().numpy())
    assert isinstance(out, np.ndarray)
    with pytest.raises(ValueError, match="zero matrix"):
        stable_rank(torch.zeros(2, 2))


# ---------------------------------------------------------------- bad input


BAD_P = [
    ([0.5, 0.5], TypeError, "p must be a torch.Tensor"),
    (torch.tensor([1, 0]), TypeError, "p must have a floating dtype"),
    (torch.tensor([True, False]), TypeError, "p must have a floating dtype"),
    (torch.tensor([0.5, 0.5], dtype=torch.complex128), TypeError, "complex"),
    (torch.tensor(1.0), ValueError, "at least one dimension"),
    (torch.ones(3, 0), ValueError, "at least one outcome"),
    (torch.tensor([0.5, float("nan"), 0.5]), ValueError, "NaN"),
    (torch.tensor([0.5, float("inf")]), ValueError, "finite"),
    (torch.tensor([1.2, -0.2]), ValueError, "negative"),
    (torch.tensor([0.5, 0.4]), ValueError, "sum to 1"),
    (torch.tensor([[0.5, 0.5], [0.5, 0.6]]), ValueError, "sum to 1"),
]


@pytest.mark.parametrize("p, error, words", BAD_P)
def test_bad_distributions_raise(p, error, words):
    with pytest.raises(error, match=words):
        shannon_entropy(p)
    with pytest.raises(error, match=words):
        renyi_entropy(p, 2.0)


def test_float32_sum_tolerance():
    # sqrt(eps) tolerance: 1 + 1e-5 passes in float32 (eps 1.2e-7 -> tol 3.5e-4) but not in float64 (1.5e-8).
    p = torch.tensor([0.5, 0.5 + 1e-5])
    shannon_entropy(p)
    with pytest.raises(ValueError, match="sum to 1"):
        shannon_entropy(p.double())


@pytest.mark.parametrize("dim, error", [(2, ValueError), (-3, ValueError), (1.0, TypeError), (True, TypeError)])
def test_bad_dim_raises(dim, error):
    with pytest.raises(error, match="dim"):
        renyi_entropy(torch.full((2, 2), 0.5), 1.0, dim=dim)


@pytest.mark.parametrize("q, error", [(-0.5, ValueError), (float("nan"), ValueError), (-math.inf, ValueError),
                                      ("2", TypeError), (None, TypeError), (True, TypeError), (torch.tensor(2.0), TypeError)])
def test_bad_order_raises(q, error):
    p = torch.tensor([0.5, 0.5])
    for call in (lambda: renyi_entropy(p, q), lambda: singular_value_entropy(torch.eye(2), q),
                 lambda: effective_rank(torch.eye(2), q)):
        with pytest.raises(error, match="q"):
            call()


@pytest.mark.parametrize("W, error, words", [
    (torch.zeros(3, 3), ValueError, "undefined"),
    (torch.ones(3), ValueError, "W must have shape"),
    (torch.ones(2, 2, dtype=torch.int32), TypeError, "W must have a floating dtype"),
    (torch.full((2, 2), float("nan")), ValueError, "W must be finite"),
])
def test_bad_matrices_raise(W, error, words):
    for fn in (singular_value_entropy, effective_rank, stable_rank):
        with pytest.raises(error, match=words):
            fn(W)


def test_bad_normalize_and_power():
    with pytest.raises(TypeError, match="normalize"):
        singular_value_entropy(torch.eye(2), normalize="yes")
    with pytest.raises(ValueError, match="power"):
        singular_value_entropy(torch.eye(2), power=0)


def test_inputs_not_mutated(gen):
    W = torch.randn(4, 3, generator=gen)
    p = torch.tensor([0.25, 0.75, 0.0])
    W0, p0 = W.clone(), p.clone()
    singular_value_entropy(W, 0.5, 2, True)
    renyi_entropy(p, 0.5)
    assert torch.equal(W, W0) and torch.equal(p, p0)


@pytest.mark.cuda
def test_cuda_matches_cpu(gen):
    W = torch.randn(3, 16, 8, generator=gen, dtype=torch.float64)
    for dtype in (torch.float32, torch.float64):
        for q, power in [(0.5, 1), (1.0, 1), (1 + 1e-9, 2), (2.0, 2), (math.inf, 1)]:
            got = singular_value_entropy(W.to("cuda", dtype), q, power)
            assert got.device.type == "cuda" and got.dtype == dtype
            torch.testing.assert_close(got.cpu(), singular_value_entropy(W.to(dtype), q, power), **TOL[dtype])
        torch.testing.assert_close(stable_rank(W.to("cuda", dtype)).cpu(), stable_rank(W.to(dtype)), **TOL[dtype])
