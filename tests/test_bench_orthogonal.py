"""Smoke test of ``python -m svmuon.bench orthogonal`` on a tiny problem (timings are not asserted)."""

from __future__ import annotations

import json

import pytest

from svmuon.bench import orthogonal


@pytest.mark.slow  # imports geoopt and runs four optimizers (~10 s on the shared 2-core machine)
def test_bench_orthogonal_smoke(tmp_path):
    out = tmp_path / "o.json"
    assert orthogonal.main(["--smoke", "--output", str(out)]) == 0  # n = 8, two matrices, two rounds
    data = json.loads(out.read_text())
    assert data["benchmark"] == "orthogonal" and data["goal"] == "orthogonal_muon/muon <= 1.3"
    rows = data["results"]
    assert {r["schedule"] for r in rows} == {"keller_jordan", "polar_express"}
    for r in rows:
        for key in ("muon", "orthogonal_muon", "orthogonal_muon_no_correction", "geoopt_rsgd"):
            assert r[key] > 0
        if r["schedule"] == "keller_jordan":  # the CUDA-only baseline runs on the CPU in a smoke run
            assert r["torch_muon"] > 0 and r["orthogonal_muon/torch_muon"] > 0
        # the recorded ratio recomputed: one division, ~1e-16 relative of a ratio ~1
        assert abs(r["orthogonal_muon/muon"] - r["orthogonal_muon"] / r["muon"]) < 1e-12
