"""The gpt experiment: the model, the arms' parameter split and start points, the smoke run, resuming."""

from __future__ import annotations

import json
import math

import pytest
import torch

from svmuon import singular_value_entropy
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
    assert len(fixed) == {"all": 12, "attention": 8, "mlp": 4}[scope] * (arm == "fixed-entropy")
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


@pytest.mark.parametrize("argv, match", [
    (["--smoke"], "--output-dir"),
    (["--deltas", "9"], "log k"),
    (["--scope-deltas", "-0.1"], "--scope-deltas"),
    (["--seeds", "0", "0"], "more than once"),
    (["--arms", "muon", "muon"], "more than once"),
    (["--threads", "0"], "--threads"),
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
