"""Streaming Monte Carlo statistics of the entropy of a uniformly random distribution p ~ Unif(Δ^{n-1}).

:func:`entropy_statistics` draws ``samples`` points of the simplex as normalised Exp(1) vectors (book
``thm-exp-simplex``), computes the Rényi entropy H_q of each, and keeps only running summaries:
the count, the mean and the central sums Σ(h - mean)^k for k = 2..6 (merged chunk by chunk with the
pairwise formulas of Chan et al. / Pébay, in float64) and a fixed-edge histogram. Memory is therefore
bounded by the chunk size, whatever ``samples`` is, and the standard errors of the mean, the variance and
the skewness follow from the same moments (the skewness needs moments up to order six).

Two interchangeable kernels compute the entropies of a block of draws:

* ``"numpy"`` (the CPU default): float32 Exp(1) draws from NumPy's ziggurat sampler and float32
  logarithms (one transcendental per coordinate), row sums accumulated in float64, blocks of ~2^18
  coordinates processed by ``torch.get_num_threads()`` worker threads (NumPy releases the GIL).
* ``"torch"`` (the CUDA default, also usable on CPU): the same formulas in torch on the chosen device.

Per-sample rounding error of the float32 kernel is below 1e-6 nats (tested against the float64
``svmuon.spectral.shannon_entropy``), two orders below the standard error of any reachable run; pass
``dtype=torch.float64`` for float64 draws. References: su2025entropy, devroye1986nonuniform.
"""

from __future__ import annotations

import math
import numbers
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from svmuon._validation import check_int, check_order
from svmuon.spectral.simplex import _check_device

__all__ = ["EntropyStatistics", "entropy_statistics", "entropies_from_exponentials"]

_ORDER = 6  # central sums kept: 2..6 (the skewness standard error needs the 6th moment)
_BLOCK_ELEMENTS = 1 << 18  # coordinates per NumPy work block (1 MiB of float32): cache-sized
_PROGRESS_WORK = 2e10  # samples × n above which the progress bar is on by default (about a minute)
_LOG_SERIES = 0.1  # |q - 1| below which H_q uses the expm1/log1p form (no cancellation near q = 1)
_Q_AS_INF = 1e17  # above this q, H_q = H_inf + (H_inf - log #argmax)/(q-1) equals H_inf to float64 rounding
# (|H_inf| <= log n < 50): the q = inf kernel is used, so q^... never overflows a float32 cast


@dataclass(frozen=True)
class EntropyStatistics:
    """Summary of ``samples`` entropies H_q(p), p ~ Unif(Δ^{n-1}), in nats.

    Attributes:
        n, q, samples: What was sampled.
        mean, variance, skewness, excess_kurtosis: Sample mean, unbiased variance, moment skewness
            g1 = m3 / m2^{3/2} and m4 / m2² - 3. For a point mass (variance 0: n = 1, or q = 0 where
            H_0 = log n, so every sample has the same entropy) both are 0/0; they are then reported as 0.0
            by convention (a point mass is symmetric), never NaN, and ``skewness_stderr`` is 0.0 too.
        mean_stderr, variance_stderr, skewness_stderr: Asymptotic (delta-method) standard errors from the
            sample central moments up to order 2, 4 and 6.
        edges, counts: Histogram, ``edges`` of shape ``(bins + 1,)``, ``counts`` of shape ``(bins,)``
            (int64); ``underflow``/``overflow`` count the samples outside the edges.
        minimum, maximum: Extremes of the sample.
        backend, chunk_size, seconds: How it was computed and the wall time.
    """

    n: int
    q: float
    samples: int
    mean: float
    variance: float
    skewness: float
    excess_kurtosis: float
    mean_stderr: float
    variance_stderr: float
    skewness_stderr: float
    edges: np.ndarray = field(repr=False)
    counts: np.ndarray = field(repr=False)
    underflow: int
    overflow: int
    minimum: float
    maximum: float
    backend: str
    chunk_size: int
    seconds: float

    @property
    def std(self) -> float:
        """Sample standard deviation sqrt(variance)."""
        return math.sqrt(self.variance)

    def density(self) -> tuple[np.ndarray, np.ndarray]:
        """``(centers, density)`` of the histogram, normalised by all samples (so it integrates to the
        fraction inside the edges); shapes ``(bins,)``."""
        widths = np.diff(self.edges)
        return (self.edges[:-1] + self.edges[1:]) / 2, self.counts / (self.samples * widths)


# --------------------------------------------------------------------------------------- kernels


def _np_entropies(x: np.ndarray, q: float) -> np.ndarray:
    """H_q of each row of p = x / Σ x for a NumPy block ``x`` of shape (rows, n); overwrites ``x``."""
    rows, n = x.shape
    if n == 1 or q == 0:
        return np.full(rows, 0.0 if n == 1 else math.log(n))
    np.maximum(x, np.finfo(x.dtype).tiny, out=x)  # a float32 ziggurat draw can be exactly 0; x log x -> 0
    S = x.sum(axis=1, dtype=np.float64)
    logS = np.log(S)
    if q > _Q_AS_INF:  # includes inf; np.float32(q) would overflow (with a RuntimeWarning) beyond 3.4e38
        return logS - np.log(x.max(axis=1).astype(np.float64))
    y = np.empty_like(x)
    if q == 1:
        np.log(x, out=y)
        y *= x
        return logS - y.sum(axis=1, dtype=np.float64) / S
    if abs(q - 1) < _LOG_SERIES:  # Σ p^q - 1 = Σ p expm1((q-1) log p): no cancellation near q = 1
        np.divide(x, S[:, None].astype(x.dtype), out=x)
        np.log(x, out=y)
        y *= q - 1
        np.expm1(y, out=y)
        y *= x
        return -np.log1p(y.sum(axis=1, dtype=np.float64)) / (q - 1)
    if q > 4:  # scale by the row maximum so that x^q cannot overflow float32
        M = x.max(axis=1, keepdims=True)
        np.divide(x, M, out=y)
        np.power(y, x.dtype.type(q), out=y)
        P = y.sum(axis=1, dtype=np.float64)
        return (q * (logS - np.log(M[:, 0].astype(np.float64))) - np.log(P)) / (q - 1)
    if q == 2:
        np.multiply(x, x, out=y)
    else:
        np.power(x, x.dtype.type(q), out=y)
    return (q * logS - np.log(y.sum(axis=1, dtype=np.float64))) / (q - 1)


def _torch_entropies(x: torch.Tensor, q: float) -> torch.Tensor:
    """Torch twin of :func:`_np_entropies` (any device); returns float64 of shape (rows,)."""
    rows, n = x.shape
    if n == 1 or q == 0:
        return torch.full((rows,), 0.0 if n == 1 else math.log(n), dtype=torch.float64, device=x.device)
    x.clamp_min_(torch.finfo(x.dtype).tiny)
    S = x.sum(dim=1, dtype=torch.float64)
    logS = S.log()
    if q > _Q_AS_INF:  # includes inf; see _np_entropies
        return logS - x.amax(dim=1).double().log()
    if q == 1:
        return logS - torch.special.xlogy(x, x).sum(dim=1, dtype=torch.float64) / S
    if abs(q - 1) < _LOG_SERIES:
        p = x.div_(S[:, None].to(x.dtype))
        return -torch.log1p((p * torch.expm1((q - 1) * p.log())).sum(dim=1, dtype=torch.float64)) / (q - 1)
    if q > 4:
        M = x.amax(dim=1, keepdim=True)
        P = (x / M).pow_(q).sum(dim=1, dtype=torch.float64)
        return (q * (logS - M[:, 0].double().log()) - P.log()) / (q - 1)
    P = x.pow(q).sum(dim=1, dtype=torch.float64)
    return (q * logS - P.log()) / (q - 1)


def entropies_from_exponentials(x: Any, q: float = 1.0) -> np.ndarray | torch.Tensor:
    """H_q(x / Σ x) along the last axis for Exp(1) draws ``x`` of shape ``(rows, n)``, by the fused kernel.

    This is the kernel :func:`entropy_statistics` runs, exposed so that it can be checked against
    ``svmuon.spectral.renyi_entropy``. The input is copied, never modified.

    Args:
        x: Positive draws, a NumPy array or torch tensor of shape ``(rows, n)``, float32 or float64.
        q: Rényi order in [0, inf]; 1 is Shannon.

    Returns:
        Entropies in nats, float64, shape ``(rows,)``, of the same kind (NumPy/torch) and device as ``x``.

    Raises:
        TypeError: If ``x`` is neither an array nor a tensor, or not floating.
        ValueError: If ``x`` is not 2-D, holds a negative or non-finite entry, or ``q`` is invalid.
    """
    q = check_order(q)
    if isinstance(x, np.ndarray):
        if x.dtype not in (np.float32, np.float64):
            raise TypeError(f"x must be float32 or float64, got {x.dtype}")
        bad = x.ndim != 2 or not np.all(np.isfinite(x)) or np.any(x < 0)
        if bad:
            raise ValueError(f"x must be a finite non-negative array of shape (rows, n), got shape {x.shape}")
        return _np_entropies(np.array(x, copy=True), q)
    if isinstance(x, torch.Tensor):
        if x.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"x must be float32 or float64, got {x.dtype}")
        if x.ndim != 2 or not bool(torch.isfinite(x).all()) or bool((x < 0).any()):
            raise ValueError(f"x must be a finite non-negative tensor of shape (rows, n), got shape {tuple(x.shape)}")
        return _torch_entropies(x.clone(), q)
    raise TypeError(f"x must be a numpy.ndarray or torch.Tensor, got {type(x).__name__}")


# --------------------------------------------------------------------------------------- moments


def _chunk_moments(h: np.ndarray) -> tuple[int, float, np.ndarray]:
    """(count, mean, [M_2, ..., M_6]) with M_k = Σ (h - mean)^k, by two passes over a float64 chunk."""
    if h.min() == h.max():  # a constant chunk (n = 1 or q = 0): exact zeros, not rounding noise
        return h.size, float(h[0]), np.zeros(_ORDER - 1)
    mean = float(h.mean())
    d = h - mean
    M = np.empty(_ORDER - 1)
    power = d * d
    for k in range(2, _ORDER + 1):
        M[k - 2] = power.sum()
        power *= d
    return h.size, mean, M


def _merge(A: tuple[int, float, np.ndarray], B: tuple[int, float, np.ndarray]) -> tuple[int, float, np.ndarray]:
    """Pairwise merge of central sums (Pébay 2008, eq. 2.1; Chan, Golub & LeVeque for k = 2)."""
    na, ma, Ma = A
    nb, mb, Mb = B
    if na == 0:
        return B
    N = na + nb
    delta = mb - ma
    Ma_, Mb_ = np.concatenate(([0.0, 0.0], Ma)), np.concatenate(([0.0, 0.0], Mb))  # index = order
    M = np.empty(_ORDER - 1)
    for p in range(2, _ORDER + 1):
        total = Ma_[p] + Mb_[p]
        for k in range(1, p - 1):
            total += math.comb(p, k) * ((-nb / N) ** k * Ma_[p - k] + (na / N) ** k * Mb_[p - k]) * delta**k
        total += (na * nb * delta / N) ** p * (1 / nb ** (p - 1) - (-1 / na) ** (p - 1))
        M[p - 2] = total
    return N, ma + delta * nb / N, M


def _summary(count: int, M: np.ndarray) -> dict[str, float]:
    """Variance, skewness, kurtosis and their delta-method standard errors from central sums."""
    mu = [1.0, 0.0] + [float(v) / count for v in M]  # mu[k] = k-th central moment (biased)
    m2 = mu[2]
    variance = float(M[0]) / (count - 1)
    out = {"variance": variance, "mean_stderr": math.sqrt(variance / count)}
    out["variance_stderr"] = math.sqrt(max(mu[4] - m2**2, 0.0) / count)
    if m2 <= 0:  # a point mass: every sample equal; documented convention in EntropyStatistics
        return {**out, "skewness": 0.0, "excess_kurtosis": 0.0, "skewness_stderr": 0.0}
    c22 = mu[4] - m2**2
    c23 = mu[5] - 4 * m2 * mu[3]
    c33 = mu[6] - mu[3] ** 2 - 6 * m2 * mu[4] + 9 * m2**3
    g2, g3 = -1.5 * mu[3] * m2**-2.5, m2**-1.5  # gradient of m3 / m2^{3/2}
    var_skew = (g2 * g2 * c22 + 2 * g2 * g3 * c23 + g3 * g3 * c33) / count
    out.update(skewness=mu[3] / m2**1.5, excess_kurtosis=mu[4] / m2**2 - 3, skewness_stderr=math.sqrt(max(var_skew, 0.0)))
    return out


# --------------------------------------------------------------------------------------- sampling


def _np_block(n: int, q: float, rows: int, root: int, block: int, dtype: type) -> np.ndarray:
    """Entropies of one block; its stream depends only on (root seed, global block index)."""
    rng = np.random.default_rng(np.random.SeedSequence(root, spawn_key=(block,)))
    return _np_entropies(rng.standard_exponential((rows, n), dtype=dtype), q)


class _NumpySampler:
    """Chunks of entropies from float32/64 NumPy blocks of R = 2^18 // n rows, in worker threads."""

    def __init__(self, n: int, q: float, root: int, dtype: torch.dtype):
        self.n, self.q, self.root = n, q, root
        self.dtype = np.float32 if dtype == torch.float32 else np.float64
        self.rows = max(1, _BLOCK_ELEMENTS // n)
        self.next_block = 0
        self.pool = ThreadPoolExecutor(max(1, torch.get_num_threads()))

    def __call__(self, count: int) -> np.ndarray:
        sizes = [min(self.rows, count - start) for start in range(0, count, self.rows)]
        blocks = range(self.next_block, self.next_block + len(sizes))
        self.next_block += len(sizes)
        args = [(self.n, self.q, r, self.root, b, self.dtype) for r, b in zip(sizes, blocks)]
        return np.concatenate(list(self.pool.map(lambda a: _np_block(*a), args)))

    def close(self) -> None:
        self.pool.shutdown()


class _TorchSampler:
    """Chunks of entropies from ``torch.Tensor.exponential_`` draws on ``device`` (the CUDA path)."""

    def __init__(self, n: int, q: float, root: int, dtype: torch.dtype, device: torch.device):
        self.n, self.q, self.dtype, self.device = n, q, dtype, device
        self.gen = torch.Generator(device=device).manual_seed(root)

    def __call__(self, count: int) -> np.ndarray:
        x = torch.empty((count, self.n), dtype=self.dtype, device=self.device).exponential_(generator=self.gen)
        return _torch_entropies(x, self.q).cpu().numpy()

    def close(self) -> None:
        pass


def _check_options(generator, device, dtype, backend, chunk_size, memory_budget, bins, hist_range, progress):
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    device = _check_device(device if device is not None else (generator.device if generator is not None else "cpu"))
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    if backend not in ("auto", "numpy", "torch"):
        raise ValueError(f"backend must be 'auto', 'numpy' or 'torch', got {backend!r}")
    if backend == "numpy" and device.type != "cpu":
        raise ValueError(f"backend 'numpy' runs on the CPU only, got device {device}")
    if chunk_size is not None:
        check_int(chunk_size, "chunk_size")
    check_int(memory_budget, "memory_budget", minimum=1 << 20)
    check_int(bins, "bins")
    if hist_range is not None:
        if isinstance(hist_range, (str, bytes)) or not hasattr(hist_range, "__len__") or len(hist_range) != 2:
            raise ValueError(f"hist_range must be a pair (lo, hi) of finite real numbers, got {hist_range!r}")
        if any(isinstance(v, bool) or not isinstance(v, numbers.Real) for v in hist_range):
            raise TypeError(f"hist_range must be a pair (lo, hi) of finite real numbers, got {hist_range!r}")
        try:
            lo, hi = (float(v) for v in hist_range)
        except OverflowError:
            raise ValueError(f"hist_range must be (lo, hi) with finite lo < hi, got {hist_range!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi and math.isfinite(hi - lo)):
            raise ValueError(f"hist_range must be (lo, hi) with finite lo < hi (and hi - lo finite), got {hist_range!r}")
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be True, False or None, got {type(progress).__name__}")
    return device, ("numpy" if device.type == "cpu" else "torch") if backend == "auto" else backend


def _chunk_rows(n: int, samples: int, backend: str, dtype: torch.dtype, chunk_size: int | None, budget: int) -> int:
    """Samples per chunk: the caller's ``chunk_size`` or the most the memory budget allows."""
    if chunk_size is None:
        itemsize = 4 if dtype == torch.float32 else 8
        per_sample = 64 + (3 * n * itemsize if backend == "torch" else 0)  # h, histogram and moment temporaries
        chunk_size = min(budget // per_sample, 1 << 20)  # 2^20 caps a chunk so that progress keeps moving
    if backend == "numpy":  # whole blocks per chunk: the random stream then does not depend on chunk_size
        rows = max(1, _BLOCK_ELEMENTS // n)
        chunk_size = max(rows, chunk_size // rows * rows)
    return max(1, min(chunk_size, samples))


def _default_edges(h: np.ndarray, n: int, bins: int) -> np.ndarray:
    """mean ± 8 std of the first chunk, inside [0, log n] where every H_q lies."""
    m, s = float(h.mean()), float(h.std())
    if s == 0.0:
        return np.linspace(m - 0.5, m + 0.5, bins + 1)
    return np.linspace(max(m - 8 * s, 0.0), min(m + 8 * s, math.log(n)), bins + 1)


def entropy_statistics(
    n: int,
    q: float = 1.0,
    samples: int = 100_000,
    *,
    generator: torch.Generator | None = None,
    device: Any = None,
    chunk_size: int | None = None,
    memory_budget: int = 256 << 20,
    dtype: torch.dtype = torch.float32,
    bins: int = 200,
    hist_range: tuple[float, float] | None = None,
    backend: str = "auto",
    progress: bool | None = None,
) -> EntropyStatistics:
    """Monte Carlo mean, variance, skewness (with standard errors) and histogram of H_q(p), p ~ Unif(Δ^{n-1}).

    Streams ``samples`` draws in chunks: only float64 running moments (Pébay's pairwise merge of central
    sums up to order 6) and histogram counts are kept, so memory is bounded by the chunk whatever
    ``samples`` is (10^7 samples at n = 4096 stay far below 1 GiB). The draws are reproducible: one seed
    is taken from ``generator`` and every block of draws derives its stream from it; with the NumPy backend
    the draws do not depend on ``chunk_size`` or the number of threads either (chunks hold whole blocks).

    Args:
        n: Dimension of the simplex, n >= 1.
        q: Rényi order in [0, inf] (1 = Shannon, inf = min-entropy).
        samples: Number of random distributions, >= 2.
        generator: ``torch.Generator`` that seeds the run (default: torch's global generator).
        device: ``"cpu"`` or a CUDA device (default: the generator's device, else CPU).
        chunk_size: Samples per chunk; default from ``memory_budget`` (at most 2^20).
        memory_budget: Bytes a chunk may use (default 256 MiB, at least 1 MiB).
        dtype: ``torch.float32`` (default, fast) or ``torch.float64`` draws; sums are float64 either way.
        bins: Number of histogram bins.
        hist_range: ``(lo, hi)`` histogram range; default mean ± 8 std of the first chunk within [0, log n].
        backend: ``"auto"`` (NumPy threads on CPU, torch on CUDA), ``"numpy"`` or ``"torch"``.
        progress: Show a tqdm bar; ``None`` (default) shows it only for runs above 2·10^10 samples × n
            and only on a terminal, so notebooks and chapters stay clean.

    Returns:
        An :class:`EntropyStatistics` (entropies in nats).

    Raises:
        TypeError: For a non-integer ``n``/``samples``/``chunk_size``/``bins``, a non-real ``q``, a
            ``hist_range`` holding a non-number, a generator that is not a ``torch.Generator`` or an unsupported ``dtype``.
        ValueError: For n < 1, samples < 2, q NaN or negative, an unknown backend, a bad ``hist_range``,
            a device torch cannot use here (e.g. ``"cuda"`` on a CPU-only build) or one the backend cannot use.

    References:
        su2025entropy; Pébay (2008), "Formulas for robust, one-pass parallel computation of covariances
        and arbitrary-order statistical moments", Sandia report SAND2008-6212.
    """
    n = check_int(n, "n")
    q = check_order(q)
    samples = check_int(samples, "samples", minimum=2)
    device, backend = _check_options(generator, device, dtype, backend, chunk_size, memory_budget, bins, hist_range, progress)
    chunk = _chunk_rows(n, samples, backend, dtype, chunk_size, memory_budget)
    seed_device = generator.device if generator is not None else torch.device("cpu")
    root = int(torch.randint(0, 2**62, (), generator=generator, device=seed_device))
    sampler = _NumpySampler(n, q, root, dtype) if backend == "numpy" else _TorchSampler(n, q, root, dtype, device)
    disable = (None if samples * n > _PROGRESS_WORK else True) if progress is None else not progress
    start = time.perf_counter()
    state: tuple[int, float, np.ndarray] = (0, 0.0, np.zeros(_ORDER - 1))
    edges, counts, under, over, lo, hi = None, np.zeros(bins, dtype=np.int64), 0, 0, math.inf, -math.inf
    try:
        with tqdm(total=samples, unit="sample", disable=disable, leave=False, desc=f"H_{q:g}, n={n}") as bar:
            done = 0
            while done < samples:
                h = sampler(min(chunk, samples - done))
                if edges is None:
                    edges = np.linspace(*hist_range, bins + 1) if hist_range is not None else _default_edges(h, n, bins)
                state = _merge(state, _chunk_moments(h))
                counts += np.histogram(h, bins=edges)[0]
                under += int((h < edges[0]).sum())
                over += int((h > edges[-1]).sum())
                lo, hi = min(lo, float(h.min())), max(hi, float(h.max()))
                done += h.size
                bar.update(h.size)
    finally:
        sampler.close()
    count, mean, M = state
    return EntropyStatistics(
        n=n, q=q, samples=count, mean=mean, **_summary(count, M), edges=edges, counts=counts, underflow=under,
        overflow=over, minimum=lo, maximum=hi, backend=backend, chunk_size=chunk, seconds=time.perf_counter() - start,
    )
