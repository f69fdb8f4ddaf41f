"""Smoke run of ``python -m svmuon.bench msign`` on tiny sizes: it runs, writes its JSON, and its accuracy
columns say what the schedules are known to do (the timings are not asserted: they belong to the benchmark)."""

from __future__ import annotations

import json

import pytest

from svmuon.bench import msign as bench


@pytest.mark.slow  # an SVD and three schedules, timed, plus a torch.optim.Muon step in bf16: ~10 s
def test_bench_msign_smoke(tmp_path, capsys):
    out = tmp_path / "msign.json"
    assert bench.main(["--smoke", "--sizes", "32", "--output", str(out)]) == 0  # Muon at 8, one repeat, CPU
    data = json.loads(out.read_text())
    row = data["results"]["sizes"][0]
    assert row["n"] == 32 and data["hardware"]["torch"]
    # fp32: converging schedules and the SVD reach the exact polar factor to ~1e-6 (kappa = 10);
    # Keller Jordan's quintic stays ~0.1-0.4 away in RMS (its singular values oscillate in [0.68, 1.2]).
    for name in ("polar_express", "cubic"):
        assert row[name]["polar_err"] < 1e-5 and row[name]["ns_over_floor"] > 0
    assert row["svd"]["polar_err"] < 1e-5
    assert row["keller_jordan"]["polar_err"] > 0.05
    muon = data["results"]["muon"][0]
    assert muon["torch_over_svmuon"] > 0 and muon["torch_over_svmuon_bf16"] > 0
    # each ratio is the quotient of the two step times it names, recorded beside it
    assert muon["torch_over_svmuon_bf16"] == muon["torch_step_s"] / muon["svmuon_bf16_step_s"]
    assert data["hardware"]["cpu_bf16"] in (True, False, None) and "cpu_capability" in data["hardware"]
    assert "Muon step" in capsys.readouterr().out
