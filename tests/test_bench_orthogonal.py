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
    assert data["protocol"] == "pairs"
    rows = data["results"]
    assert {r["schedule"] for r in rows} == {"keller_jordan", "polar_express"}
    for r in rows:
        for key in ("muon", "orthogonal_muon", "orthogonal_muon_no_correction", "geoopt_rsgd"):
            assert r[key] > 0
        if r["schedule"] == "keller_jordan":  # the CUDA-only baseline runs on the CPU in a smoke run
            assert r["torch_muon"] > 0 and r["orthogonal_muon/torch_muon"] > 0
        # each ratio recomputed from its own pair's Muon times: one division, ~1e-16 relative of a ratio ~1
        for key in ("orthogonal_muon", "orthogonal_muon_no_correction", "geoopt_rsgd"):
            assert abs(r[f"{key}/muon"] - r[key] / r[f"{key}_pair_muon"]) < 1e-12
            assert abs(r[f"{key}/muon_median"] - r[f"{key}_median"] / r[f"{key}_pair_muon_median"]) < 1e-12
            assert r[f"{key}_pair_muon"] >= r["muon"]  # the pooled minimum is the least of the pairs' minima


def test_paired_protocol_with_logged_stand_ins():
    """``paired``: every function in its own pair with the baseline, the order swapping, each pair's baseline times
    its own and the baseline's entry pooling them (stand-ins that log their calls; the times are not asserted)."""
    from svmuon.bench._common import paired

    log = []
    fns = {name: (lambda name=name: log.append(name)) for name in ("base", "a", "b")}
    times = paired(fns, "base", rounds=3, warmup=1)
    # pair (base, a): warm-up base, a; rounds base a | a base | base a; then the same for b
    assert log == ["base", "a", "base", "a", "a", "base", "base", "a",
                   "base", "b", "base", "b", "b", "base", "base", "b"]
    assert list(times) == ["base", "a", "b"]
    for key in ("a", "b"):
        assert len(times[key]["times"]) == len(times[key]["baseline_times"]) == 3
    assert times["base"]["times"] == times["a"]["baseline_times"] + times["b"]["baseline_times"]
    assert times["base"]["baseline_times"] == times["base"]["times"]
    alone = paired({"base": fns["base"]}, "base", rounds=2, warmup=0)
    assert len(alone["base"]["times"]) == 2
    with pytest.raises(ValueError, match="baseline must be one of"):
        paired(fns, "muon", rounds=1)
