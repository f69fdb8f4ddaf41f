"""Test matrices whose answer is known: ``U diag(s) Vᵀ`` with a chosen spectrum (DESIGN.md: one helper, shared).

Every test that needs a matrix with given singular values builds it here, so that the expected singular values,
polar factor, entropy or nearest point is known exactly (up to one rounding of the product). Also the recorded
GPT study and the mean with its standard error, which the experiment tests and the chapter-claim tests share,
and the small-sample t-tests of the chapter-claim tests in plain Python with mpmath's t tail (an independent
route from the chapters' scipy; checked against scipy in tests/test_fixed_entropy_claims.py).
"""

from __future__ import annotations

import json
import math
from typing import Sequence

import mpmath
import pytest
import torch

F64 = torch.float64


def orthonormal(n: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """An ``n × k`` float64 matrix with orthonormal columns, Haar-distributed: the Q factor of a Gaussian matrix
    with the signs of R's diagonal moved into Q (mezzadri2007generate). ``k = n`` gives an orthogonal matrix."""
    Q, R = torch.linalg.qr(torch.randn(n, k, generator=gen, dtype=F64))
    return Q * torch.sign(torch.diagonal(R))


def with_spectrum(s: Sequence[float] | torch.Tensor, m: int, n: int, gen: torch.Generator,
                  dtype: torch.dtype = F64, *, factors: bool = False):
    """``A = U diag(s) Vᵀ`` of shape ``(m, n)``, with Haar-random orthonormal ``U`` (m × k), ``V`` (n × k).

    Args:
        s: the k <= min(m, n) singular values (>= 0, any order; the other min(m, n) - k are 0).
        m, n: the shape. gen: a CPU generator (the draw is reproducible).
        dtype: of ``A``; the product is formed in float64 and rounded once (relative 6e-8 in float32), so
            the singular values of ``A`` are ``s`` to within ``~n u ‖s‖_∞`` (Weyl) for the unit roundoff u.
        factors: also return ``U`` and ``V`` (float64).

    Returns:
        ``A``, or ``(A, U, V)`` with ``factors=True``.
    """
    s = torch.as_tensor(s, dtype=F64)
    k = s.numel()
    if s.dim() != 1 or not 0 < k <= min(m, n):
        raise ValueError(f"s must hold 1 to min(m, n) = {min(m, n)} values, got shape {tuple(s.shape)}")
    U, V = orthonormal(m, k, gen), orthonormal(n, k, gen)
    A = ((U * s) @ V.T).to(dtype)
    return (A, U, V) if factors else A


def gpt_study() -> dict:
    """The recorded ``--size cpu`` GPT study, one results document per arm (skipped where it is not recorded)."""
    from svmuon._paths import results_dir
    from svmuon.experiments import _gpt_train as gt

    folder = results_dir("experiments")
    paths = {arm: folder / f"gpt-cpu-{arm}.json" for arm in gt.ARMS}
    if not all(p.exists() for p in paths.values()):
        pytest.skip("the gpt study (--size cpu) is not recorded in experiments/results")
    return {arm: json.loads(p.read_text()) for arm, p in paths.items()}


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """The mean of ``values`` and its standard error (sample standard deviation over sqrt(n))."""
    n = len(values)
    mean = sum(values) / n
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def t_p(t: float, df: float) -> float:
    """Two-sided p of Student's t: P(|T_df| > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2), in mpmath."""
    x = mpmath.mpf(df) / (df + mpmath.mpf(t) ** 2)
    return float(mpmath.betainc(mpmath.mpf(df) / 2, mpmath.mpf(1) / 2, 0, x, regularized=True))


def paired_t(a: dict[int, float], b: dict[int, float]) -> dict[str, float]:
    """Paired t of a - b over the seeds both have (dicts seed -> test loss)."""
    d = [a[s] - b[s] for s in sorted(a.keys() & b.keys())]
    mean, se = mean_se(d)
    t = mean / se
    return {"diff": mean, "se": se, "t": t, "df": len(d) - 1, "p": t_p(t, len(d) - 1), "min": min(d), "max": max(d)}


def welch_t(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Welch's unpaired t of mean(a) - mean(b), with the Welch-Satterthwaite degrees of freedom."""
    (ma, sa), (mb, sb) = mean_se(a), mean_se(b)
    va, vb = sa**2, sb**2
    t = (ma - mb) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return {"diff": ma - mb, "t": t, "df": df, "p": t_p(t, df)}
