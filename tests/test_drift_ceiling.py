"""Uncorrected steps (``polar_every=0``) may let a point drift at most ``functional.DRIFT_MAX`` off its manifold.

Before, such a run drifted on without a word (0.26 after 3,000 steps below) while a checkpoint of it could not be
loaded (a loaded drift above 0.1 is refused): a step that would leave more is now refused, naming the cause,
atomically, and every checkpoint a run writes loads.
"""

from __future__ import annotations

import pytest
import torch

from svmuon.optim import ManifoldMuon
from svmuon.optim.functional import DRIFT_MAX
from svmuon.optim.plan import OffManifoldError, StepPlan
from svmuon.orthogonal.manifolds import Orthogonal

# lr = 0.3 with three steps of Keller Jordan's schedule (whose band does not converge to 1) leaves a drift of about
# 1e-4 per step in float32 (measured: 0.054 after 500 steps, 0.1 after about 950): the ceiling is reached within 2,000
N, LR, STEPS = 16, 0.3, 2000
OPTIONS = dict(lr=LR, polar_every=0, ns_steps=3, ns_coefficients="keller_jordan")


def _point(seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return Orthogonal().project(torch.randn(N, N, generator=gen, dtype=torch.float64)).to(dtype)


def _run(polar_every: int = 0):
    W = torch.nn.Parameter(_point(0))
    opt = ManifoldMuon([W], manifold=Orthogonal(), **{**OPTIONS, "polar_every": polar_every})
    gen = torch.Generator().manual_seed(1)
    for t in range(STEPS):
        W.grad = torch.randn(N, N, generator=gen)
        before = (W.detach().clone(), opt.state_dict())
        try:
            opt.step()
        except OffManifoldError as err:
            return W, opt, t, err, before
    return W, opt, STEPS, None, None


def test_uncorrected_drift_is_refused_at_the_ceiling_atomically():
    W, opt, t, err, (W_before, state_before) = _run()
    assert err is not None, f"no refusal in {STEPS} uncorrected steps (drift {float(opt.state[W]['drift']):.3g})"
    message = str(err)
    assert "drift" in message and "polar_every" in message and "no parameter or optimizer state was changed" in message
    assert "outside the optimizer" not in message  # the cause is the uncorrected steps, not an outside change
    assert torch.equal(W.detach(), W_before)  # nothing changed
    drift = opt.state[W]["drift"]
    assert 0 < float(drift) <= DRIFT_MAX
    assert float(drift) > DRIFT_MAX / 2  # it was refused near the ceiling, not by the ordinary point check
    assert torch.equal(drift, state_before["state"][0]["drift"])


def test_every_checkpoint_of_an_uncorrected_run_loads():
    W, opt, t, err, (W_before, state_before) = _run()
    fresh = torch.nn.Parameter(_point(2))  # the usual order: optimizer built on the new model, then both loaded
    other = ManifoldMuon([fresh], manifold=Orthogonal(), **OPTIONS)
    other.load_state_dict(state_before)
    with torch.no_grad():
        fresh.copy_(W_before)
    assert float(other.state[fresh]["drift"]) <= DRIFT_MAX


def test_corrected_steps_never_meet_the_ceiling():
    W, opt, t, err, _ = _run(polar_every=1)
    assert err is None and t == STEPS
    assert float(opt.state[W]["drift"]) == 0.0


def _plan(defect: float, tolerance: float, drift: float) -> StepPlan:
    plan = StepPlan("Test")
    plan.add_batch(["w"], [torch.zeros(1, 2)], on_manifold=torch.tensor([defect <= tolerance]),
                   defect=torch.tensor([[defect]]), tolerance=torch.tensor([[tolerance]]),
                   drift=torch.tensor([drift]), drift_max=DRIFT_MAX)
    return plan


@pytest.mark.parametrize("defect, tolerance, drift, kind", [
    (0.12, 0.3, 0.12, "drift"),  # within the point check, beyond the ceiling
    (0.5, 0.3, 0.5, "off_manifold"),  # the point check fails first: it names an outside change
    (0.05, 0.3, 0.05, None),
    (DRIFT_MAX, 0.3, DRIFT_MAX, None),  # the ceiling itself is allowed (a loaded drift of 0.1 is too)
])
def test_plan_names_the_drift_only_where_the_point_check_holds(defect, tolerance, drift, kind):
    failures = _plan(defect, tolerance, drift).failures()
    assert [f[0] for f in failures] == ([kind] if kind else [])
    if kind == "drift":
        assert failures[0][2] == pytest.approx(drift) and failures[0][3] == DRIFT_MAX


def test_a_drift_at_the_ceiling_loads_in_every_dtype():
    """The step compares the drift with 0.1 rounded to its dtype (float32: 0.1000000015), so the loader does too."""
    for dtype in (torch.float32, torch.float64):
        W = torch.nn.Parameter(_point(0, dtype))
        opt = ManifoldMuon([W], manifold=Orthogonal(), **OPTIONS)
        W.grad = torch.randn(N, N, dtype=dtype)
        opt.step()
        state = opt.state_dict()
        state["state"][0]["drift"] = torch.tensor(DRIFT_MAX, dtype=dtype)
        assert _plan(0.05, 0.3, float(state["state"][0]["drift"])).failures() == []  # the step's own comparison
        ManifoldMuon([torch.nn.Parameter(_point(2, dtype))], manifold=Orthogonal(), **OPTIONS).load_state_dict(state)
        state["state"][0]["drift"] = torch.tensor(DRIFT_MAX * (1 + 1e-6), dtype=dtype)
        with pytest.raises(ValueError, match="drift"):
            ManifoldMuon([torch.nn.Parameter(_point(2, dtype))], manifold=Orthogonal(), **OPTIONS).load_state_dict(state)


def test_an_outside_change_is_reported_before_a_drift_elsewhere():
    plan = StepPlan("Test")
    plan.add_batch(["w0", "w1"], [torch.zeros(2, 2)], on_manifold=torch.tensor([True, False]),
                   defect=torch.tensor([[0.12], [1.2]]), tolerance=torch.tensor([[0.3], [0.3]]),
                   drift=torch.tensor([0.12, 0.05]), drift_max=DRIFT_MAX)
    assert [(f[0], f[1]) for f in plan.failures()] == [("off_manifold", "w1"), ("drift", "w0")]


@pytest.mark.parametrize("n, tail", [(2, "(1 more parameter was refused too)"), (3, "(2 more parameters were refused too)")])
def test_the_error_counts_the_other_refused_parameters_in_good_english(n, tail):
    from svmuon.optim.plan import NonFiniteUpdateError, raise_for
    failures = [("nonfinite", f"parameter {i}", None, None, None) for i in range(n)]
    with pytest.raises(NonFiniteUpdateError, match=tail.replace("(", r"\(").replace(")", r"\)")):
        raise_for("Test", failures)


def test_functional_uncorrected_steps_need_drift_tensors():
    """Without a drift to carry, the point check took the accumulated drift for an outside change after ~7 steps
    ("the step itself lost accuracy"): ``correct=False`` without drifts is now refused before anything is planned;
    with them, the same run carries its drift (about 1e-4 a step at these settings, see ``N, LR, STEPS``: 50 steps
    stay far below the ceiling)."""
    from svmuon.optim.functional import manifold_muon
    from svmuon.orthogonal.msign import Orthogonalizer

    W = _point(0)
    kwargs = dict(lr=LR, manifold=Orthogonal(), orthogonalize=Orthogonalizer(ns_steps=3, ns_coefficients="keller_jordan"), momentum=0.95,
                  nesterov=True, eps=None, correct=False, atol=None)
    B = torch.zeros_like(W)
    with pytest.raises(ValueError, match=r"correct=False needs drifts.*parameter 0"):
        manifold_muon([W], [torch.ones_like(W)], [B], **kwargs)
    assert torch.equal(W, _point(0)) and not B.any()
    drift, gen = torch.zeros(()), torch.Generator().manual_seed(1)
    for _ in range(50):
        manifold_muon([W], [torch.randn(N, N, generator=gen)], [B], drifts=[drift], **kwargs)
    assert 0 < float(drift) < DRIFT_MAX
