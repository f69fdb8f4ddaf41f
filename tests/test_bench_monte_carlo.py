"""Smoke test of ``python -m svmuon.bench monte-carlo`` (tiny sizes) and of its NumPy baseline."""

from __future__ import annotations

import json
import math

from svmuon.bench import monte_carlo as bench
from svmuon.bench.__main__ import main as bench_main
from svmuon.spectral import entropy_variance, expected_entropy


def test_baseline_is_correct():
    n, samples = 12, 40_000
    mean, var, skew = bench.numpy_baseline(n, samples, seed=3)
    # 4 standard errors of the mean (from the exact variance): the baseline is a valid reference.
    assert abs(mean - expected_entropy(n)) < 4 * math.sqrt(entropy_variance(n) / samples)
    assert skew < 0


def test_benchmark_runs_and_writes_json(tmp_path):
    out = tmp_path / "mc.json"
    assert bench_main(["monte-carlo", "--smoke", "--output", str(out)]) == 0  # sizes 16 32, work 8192, 1 repeat
    data = json.loads(out.read_text())
    assert data["benchmark"] == "monte-carlo" and "processor" in data["hardware"]
    rows = data["results"]
    assert [r["n"] for r in rows] == [16, 32]
    for r in rows:
        assert r["ratio_median"] > 0 and r["ours_peak_bytes"] > 0 and r["numpy_peak_bytes"] > 0
        assert len(r["ours_s"]) == len(r["numpy_s"]) == 1
