"""``python -m svmuon.bench gpu`` as a CPU smoke run: the script runs end to end and records what it must."""

from __future__ import annotations

import json

import pytest
import torch

from svmuon.bench import gpu


@pytest.fixture(scope="module")
def smoke_result(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpu") / "gpu-smoke.json"
    assert gpu.main(["--smoke", "--output", str(path)]) == 0
    return json.loads(path.read_text())


@pytest.mark.slow
def test_smoke_json_has_the_fields(smoke_result):
    res = smoke_result["results"]
    assert smoke_result["benchmark"] == "gpu" and res["smoke"] is True
    for key in ("gpu", "driver", "torch", "cuda", "date"):
        assert key in res["device_info"]
    assert res["device_info"]["torch"] == torch.__version__
    for key in ("matmul", "msign", "grouping", "compile", "step", "drift", "stiefel", "goals"):  # every section ran
        assert key in res and not (isinstance(res[key], dict) and ({"error", "skipped"} & set(res[key]))), res.get(key)
    assert res["compile"]["backend"] == "eager" and res["compile"]["compiled_s"] > 0  # issue 19: KeyError 'steps'

    assert [r["n"] for r in res["msign"]] == gpu.SMOKE["msign_sizes"]
    assert set(res["goals"]) == set(gpu.GOALS)
    row = res["step"][0]
    for name in ("torch_muon", "svmuon_muon", "orthogonal_muon", "orthogonal_muon_quintic5"):
        assert row[f"{name}_s"] > 0


@pytest.mark.slow
def test_smoke_numbers_are_consistent(smoke_result):
    res = smoke_result["results"]
    m = res["matmul"]
    # derived numbers follow from the recorded times (flop counts 2n³ and 5 x 6n³), to float rounding
    assert m["tflops"] == pytest.approx(2 * m["n"] ** 3 / m["time_s"] / 1e12, rel=1e-12)
    for r in res["msign"]:
        assert r["tflops"] == pytest.approx(30 * r["n"] ** 3 / r["time_s"] / 1e12, rel=1e-12)
        assert r["fraction_of_matmul"] == pytest.approx(r["tflops"] / m["tflops"], rel=1e-12)
    row = res["step"][0]
    # default rel 1e-6: one division of two recorded floats (1e-16 relative)
    assert row["orthogonal_muon_over_torch"] == pytest.approx(row["orthogonal_muon_s"] / row["torch_muon_s"])
    for r, shape in zip(res["stiefel"], gpu._gpu_stiefel.SMOKE):  # tall (completion) and square (closed form)
        assert (r["count"], r["m"], r["n"]) == shape
        assert r["manifold_muon_stiefel_over_muon"] == pytest.approx(r["manifold_muon_stiefel_s"] / r["muon_s"])
        assert ("orthogonal_muon_over_muon" in r) == (r["m"] == r["n"]) != ("manifold_muon_stiefel_eigh_s" in r)
        assert ("manifold_muon_stiefel_eigh_s" in r) == ("manifold_muon_stiefel_eigh32_s" in r)
        assert r["host_syncs_per_step"] >= 1 and r["defect"] <= 1e-5  # float32 points after a few steps
        assert r["certificate_max"] >= 0  # the completion's bound (0 for the square closed form, which is exact)
        if r["m"] != r["n"]:  # the float32 eigh route keeps the point on the manifold too
            assert r["defect_eigh32"] <= 1e-5 and r["host_syncs_per_step_eigh32"] >= 1
    drift = res["drift"]
    assert [k for k, _ in drift["error_by_step"]][-1] == drift["steps"]
    # float32 weights, exact-enough fp32 Newton–Schulz with a Björck step each step: the error stays at
    # float32 rounding level (eps = 1.2e-7 times a small factor); the GPU goal 1e-5 is the bound checked.
    assert drift["max_error"] <= 1e-5


def test_a_failing_section_is_recorded_and_the_others_run():
    res: dict = {}
    gpu._section(res, "bad", lambda: 1 / 0)
    gpu._section(res, "good", lambda: 42)
    assert res == {"bad": {"error": "ZeroDivisionError: division by zero"}, "good": 42}
    goals = gpu._goals({"msign": res["bad"], "step": [], "drift": {"max_error": 2e-5}})
    assert goals["msign_fraction_of_matmul_at_4096"]["met"] is None
    assert goals["drift_max"] == {"goal": 1e-5, "value": 2e-5, "met": False}


def test_a_failing_section_fails_the_command(tmp_path, monkeypatch, capsys):
    """Every section is replaced by a stub (fast); one raises: its error is recorded, the others still run,
    and the exit status is 1."""
    monkeypatch.setattr(gpu, "bench_matmul", lambda *a, **k: {"n": 1, "tflops": 1.0})
    monkeypatch.setattr(gpu, "bench_msign", lambda *a, **k: [])
    monkeypatch.setattr(gpu, "bench_grouping", lambda *a, **k: {"loop_over_batched": 1.0})
    monkeypatch.setattr(gpu, "bench_compile", lambda *a, **k: 1 / 0)
    monkeypatch.setattr(gpu, "bench_steps", lambda *a, **k: [])
    monkeypatch.setattr(gpu, "bench_drift", lambda *a, **k: {"max_error": 0.0})
    path = tmp_path / "g.json"
    assert gpu.main(["--smoke", "--output", str(path)]) == 1
    res = json.loads(path.read_text())["results"]
    assert res["compile"] == {"error": "ZeroDivisionError: division by zero"} and res["drift"] == {"max_error": 0.0}
    assert "compile" in capsys.readouterr().out


def test_bad_option_is_refused(capsys):
    with pytest.raises(SystemExit):
        gpu.main(["--smoke", "--drift-steps", "0"])
    assert "drift-steps" in capsys.readouterr().err
