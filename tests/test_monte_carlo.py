"""Tests of svmuon.spectral.monte_carlo: the fused entropy kernels against svmuon.spectral.renyi_entropy,
the streaming moments against a direct computation, and the statistics against the exact theory within
4 standard errors."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
import torch
from scipy import stats

from svmuon.spectral import entropy_statistics, entropy_variance, expected_entropy, renyi_entropy, shannon_entropy
from svmuon.spectral.monte_carlo import _chunk_moments, _merge, _summary, entropies_from_exponentials

from conftest import DEVICES

ORDERS = [0.0, 0.5, 0.97, 1.0, 1.03, 2.0, 3.0, 7.5, math.inf]


@pytest.mark.parametrize("q", ORDERS)
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_kernel_matches_renyi_entropy(q, kind, gen):
    x64 = torch.empty(64, 300, dtype=torch.float64).exponential_(generator=gen)
    ref = renyi_entropy(x64 / x64.sum(-1, keepdim=True), q).numpy()
    # float64 kernel: same formulas up to reordering, ~1e-13 of values ~5.7 (n = 300).
    x = x64.numpy() if kind == "numpy" else x64
    got = np.asarray(entropies_from_exponentials(x, q))
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-11)
    if q == 1.0:
        np.testing.assert_allclose(got, shannon_entropy(x64 / x64.sum(-1, keepdim=True)).numpy(), rtol=1e-11, atol=1e-11)
    # float32 draws (the fast path): rounding of x to float32 changes H by ~eps32 = 6e-8 per term, logs
    # and powers in float32 add a few ulps; sums are float64. 2e-6 nats is ~30 eps32 of log n.
    x32 = x64.float()
    ref32 = renyi_entropy(x32.double() / x32.double().sum(-1, keepdim=True), q).numpy()
    got32 = np.asarray(entropies_from_exponentials(x32.numpy() if kind == "numpy" else x32, q))
    np.testing.assert_allclose(got32, ref32, rtol=0, atol=2e-6)


def test_kernel_does_not_mutate_and_rejects_bad_input():
    x = np.random.default_rng(0).standard_exponential((4, 8))
    before = x.copy()
    entropies_from_exponentials(x, 2.0)
    np.testing.assert_array_equal(x, before)
    with pytest.raises(ValueError, match="x"):
        entropies_from_exponentials(-x, 1.0)
    with pytest.raises(TypeError, match="x"):
        entropies_from_exponentials([[1.0, 2.0]], 1.0)
    with pytest.raises(ValueError, match="q"):
        entropies_from_exponentials(x, -1.0)


def test_streaming_moments_match_direct():
    h = np.random.default_rng(1).gamma(2.0, size=10_001) + 5.0  # skewed, offset: tests the centring
    state = (0, 0.0, np.zeros(5))
    for part in np.array_split(h, 7):
        state = _merge(state, _chunk_moments(part))
    count, mean, M = state
    assert count == h.size and mean == pytest.approx(h.mean(), rel=1e-14)
    direct = [np.sum((h - h.mean()) ** k) for k in range(2, 7)]
    np.testing.assert_allclose(M, direct, rtol=1e-10)  # float64 merge vs two-pass sums: a few 1e-13
    s = _summary(count, M)
    assert s["skewness"] == pytest.approx(stats.skew(h), rel=1e-10)
    assert s["excess_kurtosis"] == pytest.approx(stats.kurtosis(h), rel=1e-10)


def test_stderr_formulas_on_normal_data():
    # For normal data the delta-method errors are σ/√N, σ²√(2/N), √(6/N); sampling noise in the 4th and
    # 6th sample moments at N = 2·10^5 is a few per cent, hence rel 0.05.
    N = 200_000
    h = np.random.default_rng(2).normal(3.0, 0.5, N)
    s = _summary(N, _chunk_moments(h)[2])
    assert s["mean_stderr"] == pytest.approx(0.5 / math.sqrt(N), rel=0.01)
    assert s["variance_stderr"] == pytest.approx(0.25 * math.sqrt(2 / N), rel=0.05)
    assert s["skewness_stderr"] == pytest.approx(math.sqrt(6 / N), rel=0.05)


@pytest.mark.parametrize("n", [2, 10])
def test_statistics_match_exact_theory(n, gen):
    st = entropy_statistics(n, 1.0, 100_000, generator=gen)
    # 4 standard errors: a false failure has probability ~6e-5 per comparison.
    assert abs(st.mean - expected_entropy(n)) < 4 * st.mean_stderr
    assert abs(st.variance - entropy_variance(n)) < 4 * st.variance_stderr
    assert st.counts.sum() + st.underflow + st.overflow == st.samples == 100_000
    assert 0.0 <= st.minimum <= st.maximum <= math.log(n) + 2e-6  # float32 kernel rounding (see above)
    assert st.skewness < 0  # the left tail: distributions near a vertex of the simplex


def test_skewness_reproduced_by_an_independent_run():
    a = entropy_statistics(20, 1.0, 50_000, generator=torch.Generator().manual_seed(1))
    b = entropy_statistics(20, 1.0, 50_000, generator=torch.Generator().manual_seed(2))
    assert abs(a.skewness - b.skewness) < 4 * math.hypot(a.skewness_stderr, b.skewness_stderr)


def test_reproducible_and_independent_of_chunking():
    run = lambda chunk: entropy_statistics(  # noqa: E731
        64, 2.0, 20_000, generator=torch.Generator().manual_seed(7), chunk_size=chunk, hist_range=(2.0, 4.0)
    )
    a, b, c = run(None), run(None), run(5000)  # 5000 is rounded down to whole blocks of 4096 rows
    assert a.mean == b.mean and a.variance == b.variance and np.array_equal(a.counts, b.counts)
    # same streams (blocks are defined by the seed and n only); merge order changes rounding: ~1e-15.
    assert c.mean == pytest.approx(a.mean, rel=1e-13) and c.variance == pytest.approx(a.variance, rel=1e-10)
    assert np.array_equal(a.counts, c.counts)


def test_torch_backend_agrees_statistically(gen):
    a = entropy_statistics(50, 1.0, 20_000, generator=gen, backend="torch")
    b = entropy_statistics(50, 1.0, 20_000, generator=gen, backend="numpy")
    assert a.backend == "torch" and b.backend == "numpy"
    assert abs(a.mean - b.mean) < 4 * math.hypot(a.mean_stderr, b.mean_stderr)


def test_degenerate_cases(gen):
    one = entropy_statistics(1, 1.0, 100, generator=gen)
    assert one.mean == 0.0 and one.variance == 0.0
    zero = entropy_statistics(5, 0.0, 100, generator=gen)
    # q = 0 is log of the support size: one log, ~1 ulp
    assert zero.mean == pytest.approx(math.log(5), rel=1e-15) and zero.variance == 0.0
    # regression: a point mass used to report skewness = nan; documented convention is 0.0 (no NaN anywhere)
    for st in (one, zero):
        assert (st.skewness, st.excess_kurtosis, st.skewness_stderr, st.variance_stderr) == (0.0, 0.0, 0.0, 0.0)


def test_huge_q_is_the_min_entropy_without_warnings():
    # regression: q = 1e300 leaked "RuntimeWarning: overflow encountered in cast" from the float32 kernel
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = entropy_statistics(20, 1e300, 500, generator=torch.Generator().manual_seed(3))
        b = entropy_statistics(20, math.inf, 500, generator=torch.Generator().manual_seed(3))
        x = np.random.default_rng(0).standard_exponential((4, 9), dtype=np.float32)
        h_np = entropies_from_exponentials(x, 1e300)
        h_t = entropies_from_exponentials(torch.from_numpy(x), 1e300)
    assert a.q == 1e300 and a.mean == b.mean and a.variance == b.variance
    np.testing.assert_array_equal(h_np, entropies_from_exponentials(x, math.inf))
    # q = 1e300 takes the q = ∞ branch: the same arithmetic, bitwise
    torch.testing.assert_close(h_t, entropies_from_exponentials(torch.from_numpy(x), math.inf), rtol=0, atol=0)


@pytest.mark.parametrize(
    "hist_range,exc",
    [(("a", "b"), TypeError), ((1,), ValueError), ("ab", ValueError), ((0.0, math.nan), ValueError),
     ((-1e308, 1e308), ValueError)],
)
def test_bad_hist_range_names_it(hist_range, exc):
    with pytest.raises(exc, match="hist_range"):
        entropy_statistics(8, 1.0, 10, hist_range=hist_range)


def test_memory_is_bounded_by_the_chunk(gen):
    # Peak Python/NumPy allocation must not grow with the number of samples (8x more here).
    def peak(samples):
        tracemalloc.start()
        entropy_statistics(4096, 1.0, samples, generator=gen, chunk_size=256)
        out = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return out

    peak(512)  # first use of the multi-chunk path: one-time imports and caches are not per-sample memory
    small, large = peak(256), peak(2048)
    assert large < 1.5 * small + (1 << 20) and large < 64 << 20


@pytest.mark.parametrize(
    "kwargs,exc",
    [
        ({"n": 0}, ValueError),
        ({"n": 2.0}, TypeError),
        ({"samples": 1}, ValueError),
        ({"q": -1.0}, ValueError),
        ({"q": math.nan}, ValueError),
        ({"generator": 3}, TypeError),
        ({"dtype": torch.float16}, TypeError),
        ({"backend": "gpu"}, ValueError),
        ({"hist_range": (1.0, 0.0)}, ValueError),
        ({"chunk_size": 0}, ValueError),
        ({"progress": "yes"}, TypeError),
    ],
)
def test_bad_input(kwargs, exc):
    args = {"n": 8, "q": 1.0, "samples": 10, **kwargs}
    with pytest.raises(exc, match="|".join(kwargs)):
        entropy_statistics(**args)


@pytest.mark.cuda
@pytest.mark.parametrize("device", [d for d in DEVICES if d != "cpu"] or ["cuda"])
def test_cuda_matches_theory(device):
    st = entropy_statistics(256, 1.0, 200_000, device=device, generator=torch.Generator(device).manual_seed(0))
    assert st.backend == "torch"
    assert abs(st.mean - expected_entropy(256)) < 4 * st.mean_stderr
    assert abs(st.variance - entropy_variance(256)) < 4 * st.variance_stderr


def test_density_and_progress_bar(gen, capsys):
    st = entropy_statistics(30, 1.0, 5_000, generator=gen, progress=True, bins=50)
    centers, dens = st.density()
    inside = 1 - (st.underflow + st.overflow) / st.samples
    # the histogram density integrates to the fraction of samples inside the edges (exact up to rounding)
    assert np.sum(dens * np.diff(st.edges)) == pytest.approx(inside, rel=1e-12)
    assert centers.shape == (50,) and "sample" in capsys.readouterr().err
    entropy_statistics(30, 1.0, 5_000, generator=gen)  # default: no bar for small runs
    assert capsys.readouterr().err == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error for a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda")])
def test_unavailable_cuda_device_is_a_value_error(device):
    # regression: device="cuda" on a CPU build raised "Cannot get CUDA generator without ATen_cuda library"
    with pytest.raises(ValueError, match="device must name an available torch device"):
        entropy_statistics(8, samples=10, device=device)
