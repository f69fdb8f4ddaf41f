"""``python -m svmuon.bench stiefel``: every section's smoke run, the gap figures against the SDP, the replay and the
host-read counter (timings themselves are never asserted)."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from svmuon.bench import _stiefel_quality as quality
from svmuon.bench import _stiefel_timing as timing
from svmuon.bench import stiefel
from svmuon.bench._common import host_syncs
from svmuon.bench._workloads import Workload


def _instance(m: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    Q, R = torch.linalg.qr(torch.randn(m, n, generator=gen, dtype=torch.float64))
    return Q * torch.sign(torch.diagonal(R)), torch.randn(m, n, generator=gen, dtype=torch.float64)


def test_host_syncs_counts_reads_and_restores_the_methods():
    original = torch.Tensor.__bool__
    with host_syncs() as calls:
        bool(torch.tensor(True))
        float(torch.tensor(1.0))
        torch.ones(2).tolist()
        torch.ones(3) @ torch.ones(3)  # compute without a read is not counted
    assert calls == ["__bool__", "__float__", "tolist"]
    assert torch.Tensor.__bool__ is original
    with pytest.raises(ZeroDivisionError), host_syncs():
        1 / 0
    assert torch.Tensor.__bool__ is original  # restored on error too


def test_feasible_form_is_tangent_with_unit_spectral_norm():
    W, Z = _instance(9, 4, 0)
    Phi, facts = quality.feasible(W, Z)
    assert float(torch.linalg.matrix_norm(W.mT @ Phi + Phi.mT @ W)) < 1e-13  # float64 rounding of a few products
    assert float(torch.linalg.matrix_norm(Phi, ord=2)) == pytest.approx(1.0, abs=1e-14)
    assert facts["residual_before"] == pytest.approx(float(torch.linalg.matrix_norm(W.mT @ Z + Z.mT @ W)))


def test_gap_against_the_sdp_on_a_tiny_instance():
    """The reference (Newton, certified by its dual value) against the SDP answer key, and the completion's gap
    measured from it against the gap measured from the SDP value."""
    from svmuon.orthogonal.references import stiefel_direction_sdp
    from svmuon.orthogonal.stiefel import stiefel_direction

    W, U = _instance(8, 3, 1)
    _, v = stiefel_direction_sdp(W.numpy(), U.numpy())
    ref = quality.reference(W, U)
    # the SDP is solved to gap and feasibility 1e-10 (CLARABEL); 1e-7 relative leaves room for its inaccuracy
    assert ref["p"] == pytest.approx(v, rel=1e-7)
    assert ref["p"] <= ref["d"] * (1 + 1e-12) and ref["certificate"] < 1e-8  # weak duality; Newton to 1e-10
    assert ref["d"] >= v * (1 - 1e-7)
    Phi, _ = quality.feasible(W, stiefel_direction(W, U).Phi)
    g = quality.gap(U, Phi, ref)
    assert g["gap"] == pytest.approx(1 - quality.value(U, Phi) / v, abs=1e-7)
    assert -1e-9 <= g["gap"] <= g["gap_max"]  # a feasible direction cannot beat the optimum


def test_the_compressed_slice_has_the_value_of_the_slice():
    """sdp_slice's claim (the optimum lies in the column space of [W U]), checked by the SDP on both problems."""
    from svmuon.orthogonal.references import stiefel_direction_sdp

    W, U = _instance(12, 4, 2)
    Ws, Us = quality.sdp_slice(W, U, 2)
    assert tuple(Ws.shape) == (4, 2)
    cols = [0, 3]  # the two evenly spaced columns of 4
    _, v_full = stiefel_direction_sdp(W[:, cols].numpy(), U[:, cols].numpy())
    _, v_small = stiefel_direction_sdp(Ws.numpy(), Us.numpy())
    assert v_small == pytest.approx(v_full, rel=1e-7)  # both SDPs to 1e-10, as above


def _tiny_workload(steps: int = 7) -> Workload:
    gen = torch.Generator().manual_seed(3)
    W1 = torch.linalg.qr(torch.randn(12, 4, generator=gen)).Q
    W2 = torch.linalg.qr(torch.randn(10, 4, generator=gen)).Q.T.contiguous()  # wide, orthonormal rows
    grads = [(torch.randn(12, 4, generator=gen), torch.randn(4, 10, generator=gen)) for _ in range(steps)]
    return Workload("tiny", {"task": "tiny", "sizes": (4, 12, 4, 2), "embed": 0, "batch_size": 1}, {}, 0.05, 0,
                    (W1, W2), grads)


def test_step_ratios_follow_from_the_times():
    res = timing.step_ratio(_tiny_workload(), ("muon", "stiefel"), warmup=2, sync_rounds=1)
    assert res["baseline"] == "muon" and res["warmup_rounds"] == 2 and res["timed_rounds"] == 4
    _check_ratios(res)
    with pytest.raises(ValueError, match="no timed rounds"):
        timing.step_ratio(_tiny_workload(3), ("muon",), warmup=2, sync_rounds=1)


@pytest.mark.slow  # ~3 s alone, up to 20 s on a loaded machine (geoopt's import, Newton's first solves)
def test_step_ratio_replays_every_optimizer():
    res = timing.step_ratio(_tiny_workload(), warmup=2, sync_rounds=1)
    assert set(res["optimizers"]) == set(timing.OPTIMIZERS)
    _check_ratios(res)
    assert res["optimizers"]["stiefel_newton"]["solver_iterations"]["mean"] >= 1


class _AllOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_a_kernel_floor_replays_the_steps_linear_algebra_and_nothing_else():
    w = _tiny_workload()
    floor = timing._Kernels("stiefel_kernels", w.start, w.lr)
    floor.load(w.grads[0])
    names = [func.overloadpacket.__name__ for func, _, _ in floor.calls]
    assert all(n.removesuffix("_") in timing.KERNEL_OPS for n in names)
    # the completion's two n × n eigendecompositions (completion.py) per batch: 12×4 and 10×4 (the wide 4×10 seen
    # transposed) are two batches
    assert names.count("_linalg_eigh") == 2 * 2
    with _AllOps() as seen:  # the replay dispatches exactly the recorded calls: no elementwise work, no copies
        floor.opt.step()
    assert seen.names == names
    # the private optimizer follows the stream: after one step it is where a plain replay of the same step is
    ref = timing._Replay("stiefel", w.start, w.lr)
    ref.load(w.grads[0])
    ref.opt.step()
    assert all(torch.equal(a, b) for a, b in zip(ref.params, floor.source.params))
    # Muon's floor: one quintic Newton–Schulz iteration is three products, per step and matrix
    muon = timing._Kernels("muon_kernels", w.start, w.lr)
    muon.load(w.grads[0])
    steps = muon.source.opt.param_groups[0]["ns_steps"]
    assert len(muon.calls) == 3 * steps * len(w.start)


def test_the_baseline_alone_and_the_one_round_protocol():
    res = timing.step_ratio(_tiny_workload(), ("muon",), warmup=2, sync_rounds=1)
    _check_ratios(res)  # a pair of the baseline with itself: one run, ratio 1
    ab = timing.one_round(_tiny_workload(), ("muon", "stiefel", "stiefel_float32"), warmup=2)
    assert ab["timed_rounds"] == 5 and ab["names"] == ["muon", "stiefel", "stiefel_float32"]
    base = ab["optimizers"]["muon"]
    assert base["ratio_of_medians"] == 1.0 and base["ratio_of_minima"] == 1.0
    assert all(r["ratio_of_medians"] > 0 for r in ab["optimizers"].values())
    with pytest.raises(ValueError, match="baseline first"):
        timing.one_round(_tiny_workload(), ("stiefel", "muon"), warmup=2)


class _Logged:
    """A stand-in replay that logs its loads and steps (``opt.step``) into a shared list."""

    def __init__(self, name, log):
        self.name, self.log, self.opt = name, log, self

    def load(self, grads):
        self.log.append(("load", self.name))

    def step(self):
        self.log.append(("step", self.name))

    def iterations(self):
        return [1.0]


def test_every_step_runs_right_after_the_training_context_and_the_order_rotates():
    log = []
    runs = {n: _Logged(n, log) for n in ("muon", "a", "b")}
    times, iterations = timing._timed_rounds(runs, [0, 1], [2, 3, 4], lambda k: log.append(("context", k)))
    steps = [name for kind, name in log if kind == "step"]
    assert steps == ["muon", "a", "b", "a", "b", "muon", "b", "muon", "a", "muon", "a", "b", "a", "b", "muon"]
    for i, entry in enumerate(log):  # load, then the context of that round, then the step
        if entry[0] == "step":
            assert log[i - 1][0] == "context" and log[i - 2] == ("load", entry[1])
    contexts = [k for kind, k in log if kind == "context"]
    assert contexts == [k for k in range(5) for _ in range(3)]  # warm-up rounds included
    assert all(len(times[n]["thread_s"]) == len(times[n]["wall_s"]) == 3 for n in runs)  # warm-up untimed
    assert iterations == [1.0] * 6  # the timed steps of a and b, not the baseline's


def _check_ratios(res):
    assert res["protocol"] == "pairs"
    others = [n for n in res["optimizers"] if n != "muon"]
    for name, row in res["optimizers"].items():
        # each optimizer against the baseline of its own pair; the baseline's row pools its pairs' times
        base = row.get("baseline_times", row["times"])
        assert (name == "muon") == ("baseline_times" not in row)
        for clock in ("wall_s", "thread_s"):
            t = row["times"][clock]
            assert len(t) == 4 * (max(1, len(others)) if name == "muon" else 1)
            assert row[clock]["median"] == statistics.median(t) and row[clock]["min"] == min(t)
            assert len(base[clock]) == len(t) or name == "muon"
            r = row["ratio"][clock.removesuffix("_s")]
            assert r["ratio_of_medians"] == statistics.median(t) / statistics.median(base[clock])
            assert r["ratio_of_minima"] == min(t) / min(base[clock])
        assert row["baseline_thread_s"]["median"] == statistics.median(base["thread_s"])
        # every constrained optimizer kept its points on the manifold (float32 rounding)
        if name not in ("muon", timing.FLOOR, *timing.KERNELS):
            assert row["defect_end"] < 1e-4
    if others:
        pooled = res["optimizers"]["muon"]["times"]["thread_s"]
        assert sorted(pooled) == sorted(t for n in others for t in res["optimizers"][n]["baseline_times"]["thread_s"])
    assert res["optimizers"]["muon"]["host_syncs_per_step"]["max"] == 1  # Muon's one fused check (test_muon.py)


def test_a_failing_section_fails_the_command_and_the_others_run(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(timing, "solver_rows", broken)
    out = tmp_path / "s.json"
    assert stiefel.main(["--smoke", "--sections", "solvers", "--output", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["results"]["errors"] == {"solvers": "RuntimeError: boom"}
    assert "workloads" not in data["results"]  # the solvers section needs no recorded stream


@pytest.mark.slow  # ~25 s on a loaded 2-core machine: two recorded streams, every section
def test_bench_stiefel_smoke(tmp_path):
    out = tmp_path / "s.json"
    assert stiefel.main(["--smoke", "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    res = data["results"]
    assert data["benchmark"] == "stiefel" and "errors" not in res and set(data["definitions"]) >= {
        "ratio_of_medians", "ratio_of_minima", "gap"}
    assert set(res["workloads"]) == {"digits", "text"} and res["workloads"]["text"]["steps"] == stiefel.SMOKE["steps"]
    for name in ("digits", "text"):
        ratio = res["step_ratio"][name]["optimizers"]
        assert ratio["muon"]["ratio"]["thread"]["ratio_of_medians"] == 1.0
        check = res["step_ratio"][name]["in_training"]  # the protocol's check: timed inside training
        assert check["steps"] == 8 and check["timed_steps"] == 6 and set(check["optimizers"]) == set(timing.IN_TRAINING)
        assert check["optimizers"]["muon"]["ratio_of_medians"] == 1.0
        assert all(r["ratio_of_medians"] > 0 and np.isfinite(r["loss_last"]) for r in check["optimizers"].values())
        ab = res["step_ratio"][name]["one_round"]  # the protocol's A/B: one round through every replay but Newton
        assert ab["names"] == list(timing.ONE_ROUND) and ab["timed_rounds"] == 6
        gap = res["gap"][name]
        for row in gap["completion"]:  # the reference is the optimum up to its own certificate
            assert row["gap"] >= -1e-9 - row["reference_certificate"] and row["gap_max"] >= row["gap"]
            assert row["certificate"] >= row["gap"] - 1e-9  # the completion's certificate is an upper bound
            low = row["work_float32"]  # the float32 work dtype: feasible to 256 u (its unit test's bound), a gap
            assert low["spectral_norm"] <= 1 + 2.0 ** -16 and -1e-6 <= low["gap"] <= 0.05  # below 5 % (measured 1 %)
        for row in gap["sdp"]:  # CLARABEL to 1e-10; the reference to 1e-10 with its certificate
            assert abs(row["reference_vs_sdp"]) < 1e-7 and row["shape"] == [6, 3]
        assert all(r["residual_before"] > 0 for r in gap["amortized"])
        assert all(r[s]["converged"] for r in res["newton"][name] for s in ("cold", "warm"))
    for row in res["solvers"]:
        assert row["shape"] == [12, 4] and row["history"] is not None
        assert row["msign_equivalents"]["ratio_of_medians"] == pytest.approx(
            row["seconds"]["median"] / row["msign_seconds"]["median"], rel=1e-12)
        if row["solver"] in ("completion", "newton"):
            assert row["converged"]
    assert np.isfinite([r["gap"] for r in res["gap"]["text"]["completion"]]).all()
    for name in ("digits", "text"):  # the targets, each figure beside its target and verdict
        targets = res["targets"][name]
        assert set(targets) == {"stiefel", "stiefel_float32", "stiefel_matmul", "stiefel_newton", "stiefel_amortized"}
        for figures in targets.values():
            assert set(figures) == set(stiefel.TARGETS)
            assert all(f["value"] is not None and f["met"] == (f["value"] <= f["target"]) for f in figures.values())
        assert targets["stiefel"]["step_ratio"]["value"] == \
            res["step_ratio"][name]["optimizers"]["stiefel"]["ratio"]["thread"]["ratio_of_medians"]


def test_optimizers_option_keeps_the_baseline_and_the_order():
    assert stiefel._chosen(timing.OPTIMIZERS, ["stiefel_float32", "stiefel"]) == ("muon", "stiefel", "stiefel_float32")
    assert stiefel._chosen(timing.IN_TRAINING, []) == ("muon",)
    with pytest.raises(SystemExit):  # argparse: an unknown name is refused, naming the choices
        stiefel._parser().parse_args(["--optimizers", "adam"])


def test_text_wide_workload_has_a_transformer_mlps_shapes():
    from svmuon.bench._workloads import WORKLOADS
    from svmuon.experiments.stiefel_tasks import StiefelMLP

    config = WORKLOADS["text-wide"]
    model = StiefelMLP(0, config["sizes"], config["embed"])
    assert tuple(model.W1.shape) == (1024, 256) and tuple(model.W2.shape) == (256, 1024)
    assert config["sizes"][0] // config["embed"] == WORKLOADS["text"]["sizes"][0] // WORKLOADS["text"]["embed"]


@pytest.mark.slow  # ~15 s: one 1024x256 stream of 8 steps, three replays
def test_bench_stiefel_smoke_text_wide_with_chosen_optimizers(tmp_path):
    out = tmp_path / "w.json"
    assert stiefel.main(["--smoke", "--workloads", "text-wide", "--sections", "ratio", "--optimizers",
                         "stiefel_float32", "--output", str(out)]) == 0
    res = json.loads(out.read_text())["results"]
    assert res["workloads"]["text-wide"]["shapes"] == [[1024, 256], [256, 1024]]
    ratio = res["step_ratio"]["text-wide"]
    assert list(ratio["optimizers"]) == ["muon", "stiefel_float32"]
    assert list(ratio["in_training"]["optimizers"]) == ["muon", "stiefel_float32"]
    assert ratio["one_round"]["names"] == ["muon", "stiefel_float32"]
    assert ratio["optimizers"]["stiefel_float32"]["host_syncs_per_step"]["max"] == 1
    target = res["targets"]["text-wide"]["stiefel_float32"]
    assert target["step_ratio"]["value"] == ratio["optimizers"]["stiefel_float32"]["ratio"]["thread"]["ratio_of_medians"]
    assert target["gap"]["value"] is None and target["gap"]["met"] is None  # section gap not run: not measured
