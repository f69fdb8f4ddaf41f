"""``python -m svmuon.experiments stiefel-digits`` (both tasks) and its task module, on tiny budgets."""

from __future__ import annotations

import json

import pytest
import torch

from svmuon.experiments import stiefel_digits, stiefel_tasks


@pytest.mark.slow  # ~10-20 s: Newton on the digits' rank-deficient gradients (see the chapter)
def test_one_epoch_keeps_the_weights_orthonormal():
    torch.set_num_threads(1)
    data = stiefel_digits.load_digits_split()
    assert data["train"][0].shape[1] == 64
    for method in ("stiefel_muon", "stiefel_muon_exact", "stiefel_muon_amortized", "param_orthogonal", "adam"):
        r = stiefel_digits.train(method, stiefel_digits.GRIDS[method][1], 0, data, epochs=1)
        assert len(r["loss"]) == 1 and 0 < r["loss"][0] < 2.31  # below log(10): it learned something
        assert r["step_ms_median"] > 0
        if method == "stiefel_muon_amortized":
            # one dual step leaves Φ far from tangent (residual 2-6 on these gradients) and the retraction's series,
            # sized for a tangent Φ, is then inexact: ~5e-5 after the Björck step, within the optimizer's own point
            # check (atol = √eps = 3.5e-4 in float32); reported to the lead
            assert r["orth_error"][0] <= 3.5e-4, r["orth_error"]
        elif method != "adam":  # float32 rounding over ~17 steps; Adam is unconstrained and leaves the manifold
            assert r["orth_error"][0] <= 1e-5, (method, r["orth_error"])


def test_text_runs_record_loss_against_time():
    torch.set_num_threads(1)
    data = stiefel_tasks.load_task("text", chars=20_000)
    r = stiefel_digits.train("stiefel_muon", 0.05, 0, data, 2, task="text", steps_per_epoch=2)
    for key in ("loss", "val_loss", "test_loss", "val_acc", "test_acc", "wall_s", "thread_s", "optimizer_s",
                "optimizer_thread_s", "orth_error", "gap", "iterations"):
        assert len(r[key]) == 2, key
    assert 0 < r["optimizer_s"][0] <= r["wall_s"][0] < r["wall_s"][1]  # cumulative, the optimizer inside the loop
    assert 0 < r["optimizer_thread_s"][0] <= r["thread_s"][0]
    assert r["iterations"] == [0.0, 0.0] and all(g > 0 for g in r["gap"])  # closed form; a certificate per step
    assert "residual" not in r  # only the iterative solvers report one
    assert r["task"] == "text" and r["seconds"] == r["wall_s"][-1]


def test_the_network_draws_what_it_drew_before():
    """StiefelMLP(seed) without an embedding draws exactly the recorded runs' values (the embedding comes last)."""
    a, b = stiefel_tasks.StiefelMLP(3), stiefel_tasks.StiefelMLP(3, (64, 128, 32, 97), embed=8)
    assert torch.equal(a.W1, b.W1) and torch.equal(a.W2, b.W2) and a.embedding is None
    assert tuple(b.embedding.weight.shape) == (97, 8)
    x = torch.randint(97, (5, 8))
    assert b(x).shape == (5, 97)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: stiefel_tasks.load_task("imagenet"), "task"),
    (lambda: stiefel_tasks.build("sgd", stiefel_tasks.StiefelMLP(0), 0.1), "method"),
    (lambda: stiefel_tasks.StiefelMLP(0, (64, 32, 16, 10)), "sizes"),
])
def test_bad_arguments_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.slow  # ~17 s on a loaded 2-core machine: every method on both tasks, 4 steps each
def test_smoke_command_writes_both_tasks(tmp_path):
    out = tmp_path / "s.json"
    assert stiefel_digits.main(["--smoke", "--output", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["experiment"] == "stiefel-digits" and doc["smoke"] is True and set(doc["tasks"]) == {"digits", "text"}
    assert {(r["task"], r["method"]) for r in doc["runs"]} == {(t, m) for t in ("digits", "text")
                                                              for m in stiefel_digits.GRIDS}
    assert doc["tasks"]["text"]["score"] == "val_loss (min)" and "environment" in doc
    amortized = next(r for r in doc["runs"] if r["method"] == "stiefel_muon_amortized")
    assert amortized["iterations"] == [1.0] and amortized["residual"][0] > 0
