"""Smoke run of ``python -m svmuon.bench muon-step`` on a tiny matrix: it runs, writes its JSON, and counts
exactly one host synchronisation per step for svmuon's optimizers and none for torch.optim.Muon."""

from __future__ import annotations

import json

import pytest

from svmuon.bench import muon_step


@pytest.mark.slow  # the import-time measurement starts a fresh interpreter that imports torch (~5-10 s)
def test_bench_muon_step_smoke(tmp_path):
    out = tmp_path / "m.json"
    assert muon_step.main(["--smoke", "--output", str(out)]) == 0  # n = 16, two rounds, every section
    data = json.loads(out.read_text())
    step = data["results"]["step"]
    assert step["host_syncs_per_step"] == {"Muon": 1, "OrthogonalMuon": 1, "torch.optim.Muon": 0}
    assert step["muon_step/msign_plus_momentum"] > 0 and step["orthogonal_muon_step/baseline"] > 0
    imp = data["results"]["import"]
    assert imp["heavy_modules_imported"] == []  # no SymPy, SciPy, pandas, DTensor for `from svmuon import Muon`
    assert 0 < imp["seconds_over_torch"] < 5  # parsed (the 0.3 s budget is the benchmark's, not a test)


def test_count_syncs_counts_read_backs():
    import torch

    t = torch.ones(3)
    assert muon_step.count_syncs(lambda: (bool(t.all()), t.sum().item(), t.tolist(), float(t[0]))) == 4
    assert muon_step.count_syncs(lambda: t * 2) == 0
    assert bool(t.all())  # the patch is undone
