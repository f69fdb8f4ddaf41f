"""The gpt experiment: the model, the arms' parameter split and start points, the smoke run, resuming."""

from __future__ import annotations

import json
import math

import pytest
import torch

from svmuon import singular_value_entropy
from helpers import gpt_study, mean_se
from svmuon.experiments import _gpt_train as gt
from svmuon.experiments import gpt
from svmuon.experiments._gpt_model import GPT, KINDS, GPTConfig
from svmuon.orthogonal.stiefel import Stiefel

CFG = GPTConfig(context=8, d_model=16, n_layer=2, n_head=2)


def test_model_is_causal_with_separate_matrices_and_tied_output():
    torch.manual_seed(0)
    net = GPT(CFG, seed=0)
    x = torch.randint(0, CFG.vocab, (2, 8))
    y = x.clone()
    y[:, 5:] = (y[:, 5:] + 1) % CFG.vocab  # change the future only
    with torch.no_grad():
        a, b = net(x), net(y)
    assert a.shape == (2, 8, CFG.vocab)
    assert torch.equal(a[:, :5], b[:, :5]) and not torch.equal(a[:, 5:], b[:, 5:])
    mats = net.matrices()
    assert sorted(mats) == sorted(f"{i}.{k}" for i in range(2) for k in KINDS)
    assert all(tuple(mats[f"0.{k}"].shape) == CFG.shapes()[k] for k in KINDS)
    assert len({id(p) for p in mats.values()}) == len(mats)  # each a parameter of its own
    # GPT-2 initialisation: std 0.02, the residual projections 0.02 / √(2 n_layer) (4096-entry sample: ±3 %)
    assert mats["0.mlp_in"].std().item() == pytest.approx(0.02, rel=0.06)
    assert mats["0.mlp_out"].std().item() == pytest.approx(0.01, rel=0.06)


@pytest.mark.parametrize("arm, scope", [(a, "all") for a in gt.ARMS] + [("fixed-entropy", "attention"),
                                                                      ("fixed-entropy", "mlp")])
def test_every_parameter_has_one_optimizer_and_manifold_arms_start_on_it(arm, scope):
    model, opts = gt.build(arm, CFG, seed=1, lr=0.01, delta=0.42, scope=scope, muon_lr=3e-3)
    owned = [id(p) for o in opts.values() for g in o.param_groups for p in g["params"]]
    assert sorted(owned) == sorted(id(p) for p in model.parameters())  # each exactly once
    for o in opts.values():
        if hasattr(o, "manifold"):
            for g in o.param_groups:
                for p in g["params"]:
                    assert float(Stiefel().defect(p.detach()).max()) < 1e-5  # float32 polar factor / QR
    fixed = [(n, m) for n, m in model.hidden().items() if hasattr(m, "h")]
    assert len(fixed) == {"all": 12, "attention": 8, "mlp": 4}[scope] * (arm in gt.FIXED_ARMS)
    for name, m in fixed:
        W = m.weight().detach().double()
        assert abs(float(singular_value_entropy(W)) - (math.log(min(W.shape)) - 0.42)) < 1e-5  # float32 factors


def test_fixed_entropy_layers_keep_the_plain_frobenius_norm_and_batched_spectra_are_exact():
    model, _ = gt.build("fixed-entropy", CFG, seed=0, lr=0.01, delta=1.2)
    for name, m in model.hidden().items():
        n_out, n_in = m.U.shape[0], m.V.shape[0]
        std = 0.02 if name.split(".")[1] in ("q", "k", "v", "mlp_in") else 0.02 / 2
        assert float(m.weight().detach().norm() ** 2) == pytest.approx(std**2 * n_in * n_out, rel=1e-5)
    x = torch.randint(0, CFG.vocab, (3, 8))
    with torch.no_grad():
        hooked = model(x)
        hooks = (dict(model._forward_pre_hooks), dict(model._forward_hooks))
        model._forward_pre_hooks.clear(), model._forward_hooks.clear()
        plain = model(x)
    model._forward_pre_hooks.update(hooks[0]), model._forward_hooks.update(hooks[1])
    assert torch.allclose(hooked, plain, rtol=0, atol=1e-6)  # float32 rounding of the same products
    assert all(m.cached_sigma is None for m in model.hidden().values())  # cleared after the pass


@pytest.mark.parametrize("delta", [0.0, 1.2])
def test_unit_scale_fixed_entropy_layers_start_at_a_stiefel_matrix_norm(delta):
    # ‖W‖_F² = k, so at δ = 0 (a flat spectrum) every singular value is 1, as for the Stiefel arm's matrices
    model, _ = gt.build("fixed-entropy-unit", CFG, seed=0, lr=0.01, delta=delta)
    for name, m in model.hidden().items():
        W = m.weight().detach().double()
        sv = torch.linalg.svdvals(W)
        assert float((sv**2).sum()) == pytest.approx(min(W.shape), rel=1e-5), name  # float32 factors
        if delta == 0.0:
            assert torch.allclose(sv, torch.ones_like(sv), rtol=0, atol=1e-5), name


def test_learning_rate_schedule():
    size = gt.SIZES["cpu"]
    f = [gt.lr_factor(t, size) for t in range(size.steps)]
    assert f[0] == pytest.approx(1 / size.warmup) and f[-1] == pytest.approx(0.1)  # warm-up start, cosine end
    assert all(b > a for a, b in zip(f[:size.warmup - 1], f[1:size.warmup]))  # rises through the warm-up
    assert all(b <= a for a, b in zip(f[size.warmup - 1:], f[size.warmup:]))  # then only falls
    assert max(f) == pytest.approx(1.0, abs=0.01)


def test_smoke_one_arm_writes_resumes_and_refuses_other_settings(tmp_path, capsys):
    """~2 s: the AdamW arm of the smoke size, twice (the second run has nothing left to do)."""
    torch.set_num_threads(1)
    assert gpt.main(["--smoke", "--arms", "adamw", "--output-dir", str(tmp_path)]) == 0
    path = tmp_path / "gpt-smoke-cpu-adamw.json"
    doc = json.loads(path.read_text())
    assert doc["lr"] in doc["grid"] and len(doc["runs"]) == 3  # two rates, then seed 1 at the chosen one
    run = doc["runs"][0]
    assert run["curve"]["step"][0] == 0 and run["curve"]["step"][-1] == 6 and 0 < run["test_loss"] < 10
    assert set(run["entropy"]["name"]) == {f"0.{k}" for k in KINDS} and set(run["entropy"]["step"]) == {0, 3, 6}
    assert 0 < run["time"]["optimizer_share"] < 1 and {"date", "torch", "processor"} <= set(doc["environment"])
    assert set(doc["baselines"]) == set(KINDS) and "gauss_mc_q1_p1" in doc["baselines"]["q"]
    assert {"names", "sha256", "split", "vocab"} <= set(doc["data"])
    stamp = path.read_text()
    assert gpt.main(["--smoke", "--arms", "adamw", "--output-dir", str(tmp_path)]) == 0
    assert len(json.loads(path.read_text())["runs"]) == 3 and json.loads(stamp)["runs"] == doc["runs"]
    other = dict(doc, grid=[1.0, 2.0])
    path.write_text(json.dumps(other))
    with pytest.raises(SystemExit):  # refused before any compute
        gpt.main(["--smoke", "--arms", "adamw", "--output-dir", str(tmp_path)])
    assert "grid" in capsys.readouterr().err


def test_time_budget_starts_a_run_only_if_it_would_end_in_time():
    now = [0.0]
    budget = gpt.TimeBudget(100.0, clock=lambda: now[0])
    t = budget.start()  # the first run always starts, its length unknown
    now[0] = 30.0
    budget.finish(t)
    t = budget.start()  # 30 + 30 <= 100
    now[0] = 75.0
    budget.finish(t)  # the longest is now 45 s
    with pytest.raises(gpt.OutOfTime, match="2 runs done"):
        budget.start()  # 75 + 45 > 100
    unlimited = gpt.TimeBudget(None, clock=lambda: now[0])
    unlimited.finish(unlimited.start())
    now[0] = 1e9
    unlimited.start()


def test_prepared_gpu_session_script_is_valid_and_its_commands_parse(tmp_path, capsys):
    """benchmarks/on-gpu.sh (run on a lent GPU): bash syntax, and its two commands' options exist."""
    import shutil
    import subprocess

    from svmuon._paths import repo_root
    from svmuon.bench import gpu as bench_gpu

    script = repo_root() / "benchmarks" / "on-gpu.sh"
    if shutil.which("bash"):
        subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "svmuon.bench gpu --output" in text and "--size gpu --output-dir" in text and "--time-budget" in text
    gpt._parser().parse_args(["--size", "gpu", "--output-dir", str(tmp_path), "--time-budget", "480"])
    with pytest.raises(SystemExit):
        bench_gpu.main(["--help"])
    assert "--output OUTPUT" in capsys.readouterr().out


def test_smoke_stopped_by_the_time_budget_resumes(tmp_path, capsys):
    """A budget of 0 s lets exactly one run start; it is saved, and the same command goes on from there."""
    torch.set_num_threads(1)
    argv = ["--smoke", "--arms", "adamw", "--output-dir", str(tmp_path), "--time-budget", "0"]
    assert gpt.main(argv) == 0
    assert "stopped by --time-budget at arm adamw: 1 runs done" in capsys.readouterr().out
    path = tmp_path / "gpt-smoke-cpu-adamw.json"
    first = json.loads(path.read_text())["runs"]
    assert len(first) == 1
    assert gpt.main(argv[:-2]) == 0  # no budget: the rest of the plan
    assert json.loads(path.read_text())["runs"][:1] == first and len(json.loads(path.read_text())["runs"]) == 3


@pytest.mark.parametrize("argv, match", [
    (["--smoke"], "--output-dir"),
    (["--deltas", "9"], "log k"),
    (["--scope-deltas", "-0.1"], "--scope-deltas"),
    (["--seeds", "0", "0"], "more than once"),
    (["--arms", "muon", "muon"], "more than once"),
    (["--threads", "0"], "--threads"),
    (["--time-budget", "-1"], "--time-budget"),
    (["--arms", "sgd"], "invalid choice"),
])
def test_bad_arguments_fail_before_compute(argv, match, capsys, monkeypatch):
    monkeypatch.setattr(gt, "load_data", lambda size: pytest.fail("computed before checking the arguments"))
    with pytest.raises(SystemExit):
        gpt.main(argv)
    assert match in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without a GPU")
def test_cuda_without_a_gpu_is_refused(capsys):
    with pytest.raises(SystemExit):
        gpt.main(["--size", "gpu", "--output-dir", "unused"])
    assert "torch does not see" in capsys.readouterr().err


def test_arms_that_need_muon_say_so(tmp_path):
    with pytest.raises(RuntimeError, match="--arms muon"):
        gpt.main(["--smoke", "--arms", "stiefel-attention", "--output-dir", str(tmp_path)])


def test_tuning_never_picks_a_diverged_rate():
    runs = [dict(lr=lr, seed=0, delta=0.0, scope="all", val_loss=v) for lr, v in ((1, 2.0), (2, None), (3, 1.5))]
    assert gpt._best(runs, [1, 2, 3]) == 3
    assert gpt._best(runs[:2], [1, 2]) == 1
    with pytest.raises(RuntimeError, match="diverged"):
        gpt._best([runs[1]], [2])


@pytest.mark.slow  # every arm and the GPU code path (bf16 autocast, whole-library corpus) at tiny size: ~15 s
def test_smoke_every_arm_and_the_gpu_path_on_cpu(tmp_path):
    torch.set_num_threads(1)
    assert gpt.main(["--smoke", "--output-dir", str(tmp_path)]) == 0
    for arm in gt.ARMS:
        doc = json.loads((tmp_path / f"gpt-smoke-cpu-{arm}.json").read_text())
        assert all(not r["diverged"] for r in doc["runs"])
    fe = json.loads((tmp_path / "gpt-smoke-cpu-fixed-entropy.json").read_text())
    assert {(r["delta"], r["scope"]) for r in fe["runs"]} == {(0.0, "all"), (0.42, "all"), (0.0, "attention"),
                                                            (0.0, "mlp")}
    assert max(r["max_entropy_error"] for r in fe["runs"]) < 1e-5  # float32 weights, exact σ
    assert gpt.main(["--smoke", "--size", "gpu", "--device", "cpu", "--arms", "muon", "stiefel-attention",
                     "--output-dir", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "gpt-smoke-gpu-stiefel-attention.json").read_text())
    assert doc["config"]["amp"] and doc["config"]["recursive"] and not doc["runs"][0]["diverged"]


@pytest.mark.parametrize("arm", ["adamw", "muon"])
def test_a_diverging_run_is_recorded_as_diverged(arm, monkeypatch):
    """A NaN loss at the third step: AdamW writes NaN weights (the train loss shows it), Muon refuses the
    step (NonFiniteUpdateError); either way the run stops with diverged = True and no losses."""
    size = gt.SIZES["smoke"]
    data = gt.load_data(size)
    real, calls = gt._loss, []

    def poisoned(model, X, Y, amp):
        loss = real(model, X, Y, amp)
        calls.append(1)
        return loss * math.nan if model.training and len(calls) == 4 else loss  # call 1: the step-0 evaluation

    monkeypatch.setattr(gt, "_loss", poisoned)
    r = gt.train(arm, data, size, 4e-3, seed=0)
    assert r["diverged"] and r["val_loss"] is None and r["test_loss"] is None and r["steps"] == 3
    json.dumps(r, allow_nan=False)  # storable: no NaN left in the record


# ------------------------------------------------------------------------------------------ the recorded study

def _tuned(doc, *, delta=0.0, scope="all"):
    """The test losses of the runs at the arm's chosen rate (every seed) at one δ and scope."""
    return [r["test_loss"] for r in doc["runs"] if r["lr"] == doc["lr"] and r["delta"] == delta
            and r["scope"] == scope]


def _diff(a, b):
    (ma, sa), (mb, sb) = mean_se(a), mean_se(b)
    return ma - mb, math.hypot(sa, sb)


def test_recorded_study_supports_the_chapter_claims():
    """The verdicts of "Both parts on a small transformer", recomputed from the recorded JSON with plain Python
    (the chapter computes them with pandas through svmuon.experiments.gpt and asserts the same). A re-recorded
    study that breaks one fails here and in the chapter: then rewrite the prose. "Beyond two standard errors"
    is the chapter's criterion for a resolved difference."""
    docs = gpt_study()
    for arm, doc in docs.items():  # equal tuning effort: a grid of four, three seeds at the chosen rate
        assert sorted({r["lr"] for r in doc["runs"] if r["seed"] == 0}) == sorted(doc["grid"]), arm
        assert doc["lr"] not in (min(doc["grid"]), max(doc["grid"])), f"{arm} chose an end of its grid"
        assert len(_tuned(doc)) == 3, arm
    loss = {arm: _tuned(doc) for arm, doc in docs.items() if arm not in gt.FIXED_ARMS}
    for a, b in [("muon", "adamw"), ("muon", "stiefel"), ("muon", "stiefel-attention"),
                 ("stiefel-attention", "stiefel"), ("stiefel", "adamw")]:
        d, se = _diff(loss[a], loss[b])
        assert d < -2 * se, f"{a} not below {b}: {d:+.4f} ± {se:.4f}"
    # Muon ends with a higher entropy than AdamW for every kind and measure (mean over layers, then seeds)
    for measure in ("H_q1_p1", "H_q2_p1", "H_q1_p2", "H_q2_p2"):
        for kind in KINDS:
            ends = {}
            for arm in ("muon", "adamw"):
                doc, vals = docs[arm], []
                for r in doc["runs"]:
                    if r["lr"] != doc["lr"]:
                        continue
                    e = r["entropy"]
                    last = max(e["step"])
                    h = [e[measure][i] for i, (s, n) in enumerate(zip(e["step"], e["name"]))
                         if s == last and n.split(".", 1)[1] == kind]
                    vals.append(sum(h) / len(h))
                ends[arm] = vals
            d, se = _diff(ends["muon"], ends["adamw"])
            assert d > 2 * se, (measure, kind, d, se)
    # a fixed entropy: log k - 0.42 beats log k in every scope; every fixed point stays behind free Muon
    fe = docs["fixed-entropy"]
    for scope in ("all", "attention", "mlp"):
        d, se = _diff(_tuned(fe, delta=0.42, scope=scope), _tuned(fe, delta=0.0, scope=scope))
        assert d < -2 * se, (scope, d, se)
    # started at unit singular values the order reverses: log k beats log k - 0.42, which beats log k - 1.2,
    # and the plain start's δ = 0 ends above the unit start's
    fu = docs["fixed-entropy-unit"]
    for worse, better in ((0.42, 0.0), (1.2, 0.42)):
        d, se = _diff(_tuned(fu, delta=worse), _tuned(fu, delta=better))
        assert d > 2 * se, (worse, better, d, se)
    d, se = _diff(_tuned(fe, delta=0.0), _tuned(fu, delta=0.0))
    assert d > 2 * se, ("initial scale", d, se)
    # the best fixed point of either arm is unit-scale δ = 0, and it stays behind free Muon
    points = [(doc, r["scope"], r["delta"]) for doc in (fe, fu) for r in doc["runs"] if r["lr"] == doc["lr"]]
    best = min(points, key=lambda p: mean_se(_tuned(p[0], delta=p[2], scope=p[1]))[0])
    assert best[0] is fu and best[2] == 0.0, best[1:]
    d, se = _diff(_tuned(fu, delta=0.0), loss["muon"])
    assert d > 2 * se, (d, se)
    d, se = _diff(loss["stiefel-attention"], _tuned(fu, delta=0.0))  # and so does Stiefel on attention
    assert d < -2 * se, (d, se)
    # every fixed matrix at its target entropy up to the monitor's float32 SVD, which moves each σ_i by at most
    # c·ε₃₂·σ_max (Weyl; c the SVD's backward-error constant), so H by at most 2c·k·ε₃₂·p_max·(1 + |log p_min|):
    # for the near-flat spectra (δ <= 0.42: p_max <= 0.03, p_min >= 7e-4) that is 6e-6·c, for the peaked δ = 1.2
    # ones (p_max ≈ 0.07, p_min ≈ 1e-5 at the start) 1.3e-5·c; with c up to 10 (k = 128): 1e-4 and 1e-3
    for r in fe["runs"] + fu["runs"]:
        assert r["max_entropy_error"] < (1e-4 if r["delta"] <= 0.42 else 1e-3), (r["delta"], r["max_entropy_error"])
