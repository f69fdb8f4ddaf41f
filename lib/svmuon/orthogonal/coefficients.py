"""Newton–Schulz coefficient schedules for msign, each with its provenance.

One Newton–Schulz step maps ``X -> a X + b (X Xᵀ) X + c (X Xᵀ)² X``; on every singular value it acts as the
odd scalar polynomial ``p(x) = a x + b x³ + c x⁵`` (eq-newton-schulz of the chapter "Steepest descent under
the spectral norm"), so a schedule of triples is a composition of scalar maps applied to the spectrum of
``X = G / ‖G‖_F`` (whose singular values lie in (0, 1]).

Named schedules (:data:`SCHEDULES`):

* ``"cubic"``: ``(3/2, -1/2, 0)`` at every step, the classic Newton–Schulz iteration for the polar factor
  (bjorck1971iterative; higham2008functions, §8.3). Converges to 1 for every x in (0, √3), quadratically
  near 1 but only by a factor 3/2 per step for small x.
* ``"keller_jordan"``: ``(3.4445, -4.7750, 2.0315)`` at every step, the quintic of the Muon optimizer and
  the default of ``torch.optim.Muon`` (jordan2024muon). Chosen for a large slope at 0 (3.4445), it does
  NOT converge: p(1) = 0.701, its fixed points 0.868 and 1.264 repel, and the iterates of every x in
  [1e-3, 1] are caught by the attracting 4-cycle 0.682 -> 1.134 -> 0.753 -> 1.047, so they stay in
  [0.68, 1.13] after 8 steps. After Muon's 5 steps they lie in :data:`KELLER_JORDAN_BAND`
  ``= (0.4705, 1.2024)``, the one Keller Jordan band the library and the book quote (see there).
* ``"polar_express"``: the greedy minimax schedule of Polar Express (amsel2025polar): step t uses the odd
  quintic minimising ``max |1 - p(x)|`` over the current interval ``[l_t, u_t]`` (computed here by a
  Remez exchange, :func:`optimal_quintic`), starting from ``l_0 = 1e-3``, ``u_0 = 1``, with the paper's
  cushion (the interval's lower end is clamped to ``0.02407 u`` before the minimax solve, then the
  polynomial is re-centred) and safety factor (``p(x / 1.01)`` for every step but the last). The
  triples converge to ``(15/8, -10/8, 3/8)``, a quintic with a superlinearly stable fixed point at 1,
  so the schedule converges to the polar factor.
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import sys
from typing import Any, Sequence

import numpy as np

__all__ = [
    "SCHEDULES",
    "get_schedule",
    "default_steps",
    "resolve_coefficients",
    "plain_coefficients",
    "scalar_map",
    "output_max",
    "KELLER_JORDAN_BAND",
    "optimal_quintic",
    "polar_express_schedule",
]

Triple = tuple[float, float, float]

#: The named schedules, name -> (its sources as ``references.bib`` keys, a one-line provenance), plain
#: strings for ``help()`` and logs. ``"cubic"``: the classic Newton–Schulz map p(x) = (3x - x³)/2
#: (bjorck1971iterative, higham2008functions); ``"keller_jordan"``: the Muon quintic
#: (3.4445, -4.7750, 2.0315), which does not converge (jordan2024muon); ``"polar_express"``: greedy minimax
#: quintics on [1e-3, 1] with cushion 0.02407 and safety factor 1.01 (amsel2025polar). The module docstring
#: describes each.
#:
#: :meta hide-value:
SCHEDULES: dict[str, tuple[str, str]] = {
    "cubic": ("bjorck1971iterative, higham2008functions", "classic Newton–Schulz p(x) = (3x - x³)/2"),
    "keller_jordan": ("jordan2024muon", "Muon quintic (3.4445, -4.7750, 2.0315); does not converge"),
    "polar_express": ("amsel2025polar", "greedy minimax quintics on [1e-3, 1], cushion 0.02407, safety 1.01"),
}

_DEFAULT_STEPS = {"cubic": 30, "keller_jordan": 5, "polar_express": 10}

#: The Keller Jordan band, ``(min, max)`` of ``p⁵(x)`` over ``x in [1e-3, 1]`` for the quintic
#: ``p(x) = 3.4445 x - 4.7750 x³ + 2.0315 x⁵`` iterated 5 times (Muon's default), i.e. where the singular
#: values of a 5-step Newton–Schulz msign lie when those of ``G / ‖G‖_F`` lie in ``[1e-3, 1]``. Measured
#: once by iterating the scalar polynomial on 2,000,001 geometrically spaced starting values (float64):
#: min 0.470544 (at x = 1e-3; the composition increases on [0, 0.0041], so values below 1e-3 map below it,
#: ``p⁵(x) ≈ 488 x`` near 0) and max 1.202369 (attained at x ≈ 0.00411), rounded outward to 4 digits.
#: ``tests/test_coefficients.py`` recomputes both ends with mpmath (the maximum from the root of the
#: derivative). Quoted by msign, the optimizers and the chapters; its largest value of
#: ``σ²|σ² − 1|`` (the drift factor of eq-orth-drift) is ``1.2024²(1.2024² − 1) = 0.644``.
KELLER_JORDAN_BAND: tuple[float, float] = (0.4705, 1.2024)
KELLER_JORDAN_BAND_INPUT: tuple[float, float] = (1e-3, 1.0)  # the range of σ / ‖G‖_F it assumes

#: Polar Express parameters (amsel2025polar, Algorithm 1 and its accompanying code).
POLAR_EXPRESS_L0 = 1e-3
POLAR_EXPRESS_CUSHION = 0.02407327424182761
POLAR_EXPRESS_SAFETY = 0.01
_POLAR_EXPRESS_LENGTH = 10  # after ~8 steps the triples equal (15/8, -10/8, 3/8) to double precision


def optimal_quintic(lo: float, hi: float) -> Triple:
    """Odd quintic ``p(x) = a x + b x³ + c x⁵`` minimising ``max_{x in [lo, hi]} |1 - p(x)|``.

    Remez exchange: the optimum equioscillates at lo, two interior critical points q < r, and hi,
    ``1 - p = +E, -E, +E, -E``; solve the 4x4 linear system for (a, b, c, E), move q, r to the roots of
    ``p'(x) = a + 3b x² + 5c x⁴``, repeat until E settles.

    Args:
        lo, hi: interval ends, ``0 < lo <= hi``.

    Returns:
        ``(a, b, c)`` as floats.

    Raises:
        ValueError: unless ``0 < lo <= hi`` are finite.

    References:
        amsel2025polar (the greedy step), Remez exchange for the equioscillation solve.
    """
    if not (0 < lo <= hi < math.inf):
        raise ValueError(f"need 0 < lo <= hi < inf, got lo={lo}, hi={hi}")
    if lo / hi >= 1 - 5e-6:  # degenerate interval: the limit is the Taylor-optimal quintic around hi
        return 15 / 8 / hi, -10 / 8 / hi**3, 3 / 8 / hi**5
    q, r = (3 * lo + hi) / 4, (lo + 3 * hi) / 4
    E_old = math.inf
    for _ in range(100):
        nodes = np.array([lo, q, r, hi])
        M = np.stack([nodes, nodes**3, nodes**5, np.array([1.0, -1.0, 1.0, -1.0])], axis=1)
        a, b, c, E = np.linalg.solve(M, np.ones(4))
        disc = math.sqrt(max(9 * b * b - 20 * a * c, 0.0))
        q, r = math.sqrt((-3 * b - disc) / (10 * c)), math.sqrt((-3 * b + disc) / (10 * c))
        if abs(E - E_old) <= 1e-15:
            break
        E_old = E
    return float(a), float(b), float(c)


def _p(x: float, t: Triple) -> float:
    return t[0] * x + t[1] * x**3 + t[2] * x**5


@functools.lru_cache(maxsize=8)
def polar_express_schedule(
    length: int = _POLAR_EXPRESS_LENGTH,
    lo: float = POLAR_EXPRESS_L0,
    cushion: float = POLAR_EXPRESS_CUSHION,
    safety: float = POLAR_EXPRESS_SAFETY,
) -> tuple[Triple, ...]:
    """The Polar Express schedule: greedy minimax quintics for ``[lo, 1]`` (amsel2025polar).

    Step t solves :func:`optimal_quintic` on ``[max(l_t, cushion u_t), u_t]``, rescales the polynomial so
    that ``p(l_t)`` and ``p(u_t)`` sit symmetrically around 1, updates ``l_{t+1} = p(l_t)``,
    ``u_{t+1} = 2 - l_{t+1}``, and (all steps but the last) replaces p(x) by p(x / (1 + safety)) so that
    rounding errors that push a singular value above u_t cannot blow up.

    Returns:
        ``length`` triples ``(a, b, c)``.

    References:
        amsel2025polar, Algorithm 1 and §4.4 (cushion, safety factor).
    """
    hi = 1.0
    out: list[Triple] = []
    for _ in range(length):
        t = optimal_quintic(max(lo, cushion * hi), hi)
        k = 2 / (_p(lo, t) + _p(hi, t))  # re-centre around 1 on the true interval [lo, hi]
        t = (t[0] * k, t[1] * k, t[2] * k)
        lo = _p(lo, t)
        hi = 2 - lo
        out.append(t)
    s = 1 + safety
    return tuple((a / s, b / s**3, c / s**5) for a, b, c in out[:-1]) + (out[-1],)


def get_schedule(name: str) -> tuple[Triple, ...]:
    """The triples of the named schedule (a one-element tuple for the constant schedules).

    Raises:
        ValueError: unknown name.
    """
    if name == "cubic":
        return ((1.5, -0.5, 0.0),)
    if name == "keller_jordan":
        return ((3.4445, -4.7750, 2.0315),)
    if name == "polar_express":
        return polar_express_schedule()
    raise ValueError(f"ns_coefficients must be one of {sorted(SCHEDULES)} or a sequence of (a, b, c), got {name!r}")


def default_steps(coefficients: Any) -> int:
    """Default number of steps: cubic 30, keller_jordan 5, polar_express 10, explicit sequence: its length.

    The defaults reach float32 accuracy (distance to the polar factor ~1e-6 in fp32 compute) for
    spectra with ``s_min / ‖G‖_F >= 1e-3`` (cubic: ``>= 1e-4``), except ``keller_jordan``, which
    uses Muon's 5 steps and never converges.
    """
    if isinstance(coefficients, str):
        get_schedule(coefficients)
        return _DEFAULT_STEPS[coefficients]
    return len(_check_triples(coefficients))


def plain_coefficients(coefficients: Any) -> Any:
    """``coefficients`` with a NumPy array or torch tensor as nested lists (checked then as any sequence of
    triples), anything else unchanged; the optimizers store this form. Raises ``ValueError`` for a meta tensor."""
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported; this module does not need it
    if torch is not None and isinstance(coefficients, torch.Tensor):
        from svmuon._validation import check_device  # torch is loaded: a tensor exists
        check_device(coefficients, "ns_coefficients")
        return coefficients.detach().tolist()
    return coefficients.tolist() if isinstance(coefficients, np.ndarray) else coefficients


def _check_triples(coefficients: Any) -> tuple[Triple, ...]:
    coefficients = plain_coefficients(coefficients)
    if isinstance(coefficients, (str, bytes)) or not isinstance(coefficients, Sequence):
        raise TypeError(f"ns_coefficients must be a schedule name or a sequence of (a, b, c), got {coefficients!r}")
    if len(coefficients) == 3 and all(isinstance(v, numbers.Real) for v in coefficients):
        coefficients = [coefficients]  # one bare triple, as torch.optim.Muon's ns_coefficients
    out = []
    for i, t in enumerate(coefficients):
        if not isinstance(t, Sequence) or len(t) != 3:
            raise ValueError(f"ns_coefficients[{i}] must be a triple (a, b, c), got {t!r}")
        if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in t):
            raise ValueError(f"ns_coefficients[{i}] must hold three finite real numbers, got {t!r}")
        out.append(tuple(float(v) for v in t))
    if not out:
        raise ValueError("ns_coefficients must not be empty")
    return tuple(out)


def resolve_coefficients(coefficients: Any, steps: int) -> list[Triple]:
    """``steps`` triples: the schedule's first ``steps``, its last triple repeated if it is shorter.

    Args:
        coefficients: schedule name, or ``(a, b, c)`` triples: a sequence of them, a single bare triple, or
            a NumPy array / torch tensor of shape ``(k, 3)`` or ``(3,)``, read as the same nested sequence
            (:func:`plain_coefficients`). Every entry must be a finite real number (not a bool).
        steps: number of Newton–Schulz steps, >= 0.

    Raises:
        TypeError: not a name or a sequence (e.g. a 0-d array).
        ValueError: unknown name, an empty sequence, an element that is not a triple (e.g. shape ``(k, 2)``),
            non-finite, complex or bool entries, a meta tensor.
    """
    triples = get_schedule(coefficients) if isinstance(coefficients, str) else _check_triples(coefficients)
    return [triples[min(i, len(triples) - 1)] for i in range(steps)]


def scalar_map(x: Any, ns_coefficients: Any = "polar_express", ns_steps: int | None = None) -> np.ndarray:
    """Iterates of the scalar maps on ``x``: row t is ``p_t(...p_1(x))`` (row 0 is ``x``), in float64.

    What a Newton–Schulz schedule does to each singular value of ``X = G / ‖G‖_F``.

    Args:
        x: array-like of reals (any shape).
        ns_coefficients: schedule name or sequence of triples, as in :func:`svmuon.orthogonal.msign.msign`.
        ns_steps: number of steps; default :func:`default_steps`.

    Returns:
        float64 array of shape ``(ns_steps + 1, *x.shape)``.
    """
    ns_steps = default_steps(ns_coefficients) if ns_steps is None else ns_steps
    x = np.asarray(x, dtype=np.float64)
    rows = [x]
    for t in resolve_coefficients(ns_coefficients, ns_steps):
        rows.append(_p(rows[-1], t))
    return np.stack(rows)


@functools.lru_cache(maxsize=64)
def _output_max(schedule: tuple[Triple, ...]) -> float:
    x = np.geomspace(1e-12, 1.0, 40001)  # ratio 1.0007 between neighbours: the peak is found to ~1e-6
    with np.errstate(over="ignore", invalid="ignore"):  # a diverging schedule: inf, reported by the caller
        for t, run in itertools.groupby(schedule):
            x = _repeat(x, t, sum(1 for _ in run))
        peak = float(np.max(np.abs(x)))
    return peak if math.isfinite(peak) else math.inf


def _repeat(x: np.ndarray, t: Triple, times: int, period: int = 8) -> np.ndarray:
    """``p`` applied ``times`` times to ``x``, exactly: in floating point the iterates soon repeat (period 1
    after 50-80 steps for the converging schedules, 8 after ~160 for Keller Jordan's), so a long run stops there."""
    recent = [x]  # states done - period .. done - 1, oldest first
    sample = slice(None, None, 997)  # a cheap look before the full comparison
    for done in range(1, times + 1):
        x = _p(recent[-1], t)
        for lag in range(1, len(recent) + 1):  # state(done) == state(done - lag): the rest cycles with period lag
            old = recent[-lag]
            if np.array_equal(x[sample], old[sample], equal_nan=True) and np.array_equal(x, old, equal_nan=True):
                return recent[-lag + (times - done) % lag]
        recent = (recent + [x])[-period:]
    return recent[-1]


def output_max(schedule: Sequence[Sequence[float]]) -> float:
    """Largest ``|p_T(...p_1(x))|`` over ``x in (0, 1]``: the largest singular value a Newton–Schulz msign
    with these (already resolved) triples can return, since those of ``G / ‖G‖_F`` lie in (0, 1].

    Measured on a geometric grid of 40,001 points in ``[1e-12, 1]`` (float64), then raised by 1e-5
    relative to cover the grid's miss of the peak (the composition is smooth, its peak flat). For
    Keller Jordan's 5 steps it is the upper end of :data:`KELLER_JORDAN_BAND`; for the converging
    schedules it is 1 to within their accuracy.

    Args:
        schedule: the ``(a, b, c)`` triples, one per step (as from :func:`resolve_coefficients`).

    Returns:
        A float ``> 0``; 1 (times the margin) for an empty schedule, whose output is ``G / ‖G‖_F``;
        ``inf`` for a schedule that overflows float64 on (0, 1] (it diverges).
    """
    return _output_max(tuple(tuple(float(v) for v in t) for t in schedule)) * (1 + 1e-5)
