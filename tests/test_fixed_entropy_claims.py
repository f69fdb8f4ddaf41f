"""The small-sample statements of chapter "Holding the entropy fixed" about a bootstrap over a few seeds.

* Resampling n runs with replacement gives comb(2n - 1, n) distinct samples (10 for three runs, 3 for two).
* A bootstrap "probability that a point is best" (lowest resampled mean) is exactly 1 if and only if that
  point's largest run is below every other point's smallest run.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest


@pytest.mark.parametrize("n", [2, 3, 4])
def test_distinct_resamples_of_n_runs(n):
    # every ordered resample, reduced to the multiset of runs it draws (what its mean depends on)
    samples = {tuple(sorted(idx)) for idx in itertools.product(range(n), repeat=n)}
    assert len(samples) == math.comb(2 * n - 1, n)
    assert len(samples) == {2: 3, 3: 10, 4: 35}[n]


def _exact_bootstrap_p_best(points: list[np.ndarray]) -> float:
    """P(point 0 has the lowest resampled mean), every resample of every point enumerated with its weight."""
    dists = []
    for x in points:
        n = len(x)
        means = [x[list(idx)].mean() for idx in itertools.product(range(n), repeat=n)]
        dists.append(np.array(means))
    first, rest = dists[0], dists[1:]
    p = np.ones_like(first)
    for d in rest:
        p *= (d[None, :] > first[:, None]).mean(axis=1)
    return float(p.mean())


def test_bootstrap_certainty_is_an_ordering_of_the_extreme_runs():
    rng = np.random.default_rng(0)
    seen = {True: 0, False: 0}
    for _ in range(300):
        points = [rng.normal(loc, 1.0, size=3) for loc in (0.0, 1.5, 2.5)]
        certain = _exact_bootstrap_p_best(points) == 1.0
        separated = points[0].max() < min(x.min() for x in points[1:])
        assert certain == separated
        seen[certain] += 1
    assert seen[True] > 0 and seen[False] > 0  # both cases occur
