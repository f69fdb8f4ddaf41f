"""Smoke test of ``python -m svmuon.bench stiefel`` on tiny shapes (timings are not asserted)."""

from __future__ import annotations

import json

import pytest

from svmuon.bench import stiefel


@pytest.mark.slow  # ~8 s: every solver, cold and warm, plus optimizer steps
def test_bench_stiefel_smoke(tmp_path):
    out = tmp_path / "s.json"
    assert stiefel.main(["--smoke", "--output", str(out)]) == 0  # 12x4, one repeat, two timed steps
    data = json.loads(out.read_text())
    assert data["benchmark"] == "stiefel"
    rows = data["results"]["solvers"]
    assert {(r["solver"], r["start"]) for r in rows} == {(s, t) for s in stiefel.SOLVERS for t in ("cold", "warm")}
    for r in rows:
        assert r["seconds"] > 0 and r["msign_seconds"] > 0 and r["history"]
        # recomputed from the recorded times: one division, u |x| <= 1e-14 for ratios below 100
        assert abs(r["msign_equivalents"] - r["seconds"] / r["msign_seconds"]) < 1e-12
        if r["solver"] == "newton":  # the book's solver reaches the tolerance on a small tall problem
            assert r["converged"] and r["residual"] <= 1e-6
    (ratio,) = data["results"]["step_ratio"]
    assert ratio["ratio"] > 0 and ratio["defect"] <= 1e-5
