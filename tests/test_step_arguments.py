"""Bad drifts, flags and aliased state given to the manifold step, found by a hostile review (2026-12-06): each is
refused by name, before anything is written, where before some passed silently (a point check switched off, a
drift of 0.4 or inf widening it, one parameter's buffer written over another's) or failed deep inside torch."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from svmuon import Muon
from svmuon.optim import ManifoldMuon
from svmuon.optim.functional import DRIFT_MAX, manifold_muon
from svmuon.optim.plan import NonFiniteUpdateError, OffManifoldError, StepPlan
from svmuon.orthogonal.manifolds import Orthogonal
from svmuon.orthogonal.msign import Orthogonalizer

O = Orthogonal()
KW = dict(lr=0.05, manifold=O, orthogonalize=Orthogonalizer("svd"), momentum=0.9, nesterov=True, eps=None, atol=None)


def _point(n: int = 4, seed: int = 0) -> torch.Tensor:
    return O.project(torch.randn(n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))


def _stepped(polar_every: int = 1, dtype=torch.float64):
    p = torch.nn.Parameter(_point().to(dtype))
    opt = ManifoldMuon([p], lr=0.05, polar_every=polar_every)
    p.grad = torch.randn_like(p)
    opt.step()
    p.grad = torch.randn_like(p)
    return p, opt


def _unchanged_after(fn, tensors, error, match):
    before = [t.detach().clone() for t in tensors]
    with pytest.raises(error, match=match):
        fn()
    for t, b in zip(tensors, before):  # bit for bit, NaN included
        torch.testing.assert_close(t.detach(), b, rtol=0, atol=0, equal_nan=True)


def test_a_drift_that_is_not_0d_is_refused_at_load():
    """A (1,)-drift loaded: the point check came out (k, 1), its failure was read as a list and never reported,
    and a point scaled by 0.6 outside the optimizer was committed."""
    p, opt = _stepped()
    sd = opt.state_dict()
    sd["state"][0]["drift"] = torch.zeros(1, dtype=torch.float64)
    fresh = ManifoldMuon([torch.nn.Parameter(_point())], lr=0.05)
    with pytest.raises(ValueError, match=r"drift must be a 0-d floating-point tensor"):
        fresh.load_state_dict(sd)
    assert not fresh.state


def test_a_one_element_drift_set_by_hand_keeps_the_point_check():
    p, opt = _stepped()
    opt.state[p]["drift"] = torch.zeros(1, dtype=torch.float64)
    with torch.no_grad():
        p.mul_(0.6)  # an outside change: max|WᵀW - I| = 0.64
    _unchanged_after(opt.step, [p, opt.state[p]["momentum_buffer"]], OffManifoldError, "changed outside")


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 0.4, -1.0])
def test_a_carried_drift_out_of_range_is_refused_in_the_functional_api(value):
    """0.4 or inf let a point scaled by 0.6 pass (the tolerance is 2 (atol + drift) + slack); NaN and -1 were
    blamed on the point. The range is read with the step's other flags (no extra host read)."""
    W, B, d = _point() * 0.6, torch.zeros(4, 4, dtype=torch.float64), torch.tensor(value, dtype=torch.float64)
    call = lambda: manifold_muon([W], [torch.ones_like(W)], [B], correct=True, drifts=[d], **KW)  # noqa: E731
    _unchanged_after(call, [W, B, d], ValueError, r"the drift carried for parameter 0 must be in \[0, 0.1\]")


def test_a_carried_drift_out_of_range_is_refused_in_the_optimizer():
    p, opt = _stepped()
    opt.state[p]["drift"] = torch.tensor(0.4, dtype=torch.float64)  # by hand: the loader would refuse it
    _unchanged_after(opt.step, [p, opt.state[p]["momentum_buffer"]], ValueError, r"drift carried .* got 0.4")


@pytest.mark.parametrize("drift, error, match", [
    (torch.zeros((), dtype=torch.long), ValueError, r"drifts\[0\] .* 0-d floating-point tensor .* torch.int64"),
    (torch.zeros((), dtype=torch.bool), ValueError, r"drifts\[0\] .* torch.bool"),
    (torch.zeros(3), ValueError, r"drifts\[0\] .* shape \(3,\)"),
    (0.0, TypeError, r"drifts\[0\] .* got float"),
])
def test_a_drift_of_the_wrong_kind_is_named(drift, error, match):
    W, B = _point(), torch.zeros(4, 4, dtype=torch.float64)
    call = lambda: manifold_muon([W], [torch.ones_like(W)], [B], correct=False, drifts=[drift], **KW)  # noqa: E731
    _unchanged_after(call, [W, B], error, match)


def test_drifts_as_a_tensor_is_refused():
    W, B = _point(), torch.zeros(4, 4, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"drifts must be a list"):
        manifold_muon([W], [torch.ones_like(W)], [B], correct=False, drifts=torch.zeros(1), **KW)


@pytest.mark.parametrize("correct", [torch.tensor(False), None, 0, "no", [None]])
def test_correct_must_be_bools(correct):
    W, B = _point(), torch.zeros(4, 4, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"correct must be a bool or a sequence of bools"):
        manifold_muon([W], [torch.ones_like(W)], [B], correct=correct, **{**KW, "drifts": [torch.zeros(())]})


def test_numpy_bools_are_bools():
    W, B = _point(), torch.zeros(4, 4, dtype=torch.float64)
    for correct in (np.bool_(True), list(np.array([True]))):
        manifold_muon([W], [torch.ones_like(W)], [B], correct=correct, **KW)


def test_aliased_buffers_and_drifts_are_refused_in_the_functional_api():
    W1, W2 = _point(4, 0), _point(4, 1)
    B, d = torch.zeros(4, 4, dtype=torch.float64), torch.zeros((), dtype=torch.float64)
    grads = [torch.ones_like(W1), torch.ones_like(W2)]
    with pytest.raises(ValueError, match=r"momentum_buffers\[0\] .* and momentum_buffers\[1\] .* share memory"):
        manifold_muon([W1, W2], grads, [B, B], correct=True, **KW)
    with pytest.raises(ValueError, match=r"drifts\[0\] .* and drifts\[1\] .* share memory"):
        manifold_muon([W1, W2], grads, [B, B.clone()], correct=False, drifts=[d, d], **KW)
    with pytest.raises(ValueError, match=r"params\[0\] .* and params\[1\] .* share memory"):
        manifold_muon([W1, W1], grads, [B, B.clone()], correct=True, **KW)
    flat = torch.zeros(2, 4, 4, dtype=torch.float64)  # disjoint views of one storage are fine
    W = torch.stack([W1, W2])
    manifold_muon([W[0], W[1]], grads, [flat[0], flat[1]], correct=True, **KW)
    assert flat[0].abs().sum() > 0 and flat[1].abs().sum() > 0
    cols = torch.zeros(4, 8, dtype=torch.float64)  # interleaving strided views that do not overlap are fine too
    manifold_muon([W1.clone(), W2.clone()], grads, [cols[:, ::2], cols[:, 1::2]], correct=True, **KW)


def test_aliased_state_is_refused_at_load():
    a, b = torch.nn.Parameter(_point(4, 0)), torch.nn.Parameter(_point(4, 1))
    opt = ManifoldMuon([a, b], lr=0.05, polar_every=0)
    a.grad, b.grad = torch.randn_like(a), torch.randn_like(b)
    opt.step()
    for key in ("drift", "momentum_buffer"):
        sd = copy.deepcopy(opt.state_dict())  # state_dict() holds the live per-parameter dicts
        sd["state"][1][key] = sd["state"][0][key]
        before = copy.deepcopy(opt.state_dict())
        with pytest.raises(ValueError, match=rf"state\['{key}'\] of parameter .* share memory"):
            opt.load_state_dict(sd)
        after = opt.state_dict()
        for i in (0, 1):
            assert torch.equal(after["state"][i][key], before["state"][i][key])
            assert after["state"][1][key] is not after["state"][0][key]


def test_the_functional_step_writes_a_leaf_that_requires_grad():
    """Outside torch.no_grad() the first in-place write into an nn.Parameter failed, after writing the tensors
    before it (not atomic); the functional step now runs its commit under no_grad, as the optimizers do."""
    a, b = _point(4, 0), torch.nn.Parameter(_point(3, 1))
    a0, b0 = a.clone(), b.detach().clone()
    manifold_muon([a, b], [torch.randn_like(a), torch.randn_like(b)], [torch.zeros_like(a), torch.zeros_like(b)],
                  correct=True, **KW)
    assert not torch.equal(a, a0) and not torch.equal(b.detach(), b0)
    assert b.grad_fn is None and b.requires_grad


@pytest.mark.parametrize("make, option, value", [
    ("manifold", "polar_every", True), ("manifold", "polar_every", 1.0), ("muon", "nesterov", 1)])
def test_an_option_of_another_type_but_equal_value_is_checked_again(make, option, value):
    """True == 1 == 1.0: the options cache took such a change for no change, and the step ran with a value the
    constructor and the loader refuse (a checkpoint it wrote could not be loaded)."""
    if make == "manifold":
        p, opt = _stepped()
    else:
        p = torch.nn.Parameter(torch.randn(5, 2))
        opt = Muon([p], lr=0.1)
        p.grad = torch.randn(5, 2)
        opt.step()
        p.grad = torch.randn(5, 2)
    opt.param_groups[0][option] = value
    _unchanged_after(opt.step, [p], (TypeError, ValueError), rf"set after construction\): {option}")


def test_skip_reports_the_refusal_it_cannot_skip():
    """nan_policy="skip" with a NaN gradient in one parameter and a drift refusal in another: the step is refused
    (skipping would leave the drift), and the error is the drift's, not the NaN's it was asked to skip."""
    a, b = torch.nn.Parameter(_point(4, 0)), torch.nn.Parameter(_point(4, 1))
    opt = ManifoldMuon([a, b], lr=0.05, polar_every=0, nan_policy="skip")
    a.grad, b.grad = torch.randn_like(a), torch.randn_like(b)
    opt.step()
    opt.state[b]["drift"].fill_(DRIFT_MAX)
    with torch.no_grad():
        b.mul_(1.06)  # max|WᵀW - I| ≈ 0.12: within the widened check, beyond the ceiling
    a.grad, b.grad = torch.full_like(a, float("nan")), torch.randn_like(b)
    _unchanged_after(opt.step, [a, b], OffManifoldError, r"drift off its manifold.*\(1 more parameter was refused")
    assert opt.skipped_steps == 0


@pytest.mark.parametrize("polar_every", [0, 1])
def test_a_float32_drift_at_the_ceiling_loads_into_a_float64_model_and_steps(polar_every):
    """float32(0.1) = 0.10000000149 > 0.1 once cast to float64: the loader and the step test a carried drift
    against the same ceiling (CARRIED_DRIFT_MAX), so what loads also steps."""
    p32, opt32 = _stepped(polar_every=polar_every, dtype=torch.float32)
    opt32.state[p32]["drift"].fill_(DRIFT_MAX)
    p64 = torch.nn.Parameter(_point())
    opt64 = ManifoldMuon([p64], lr=0.05, polar_every=polar_every)
    opt64.load_state_dict(opt32.state_dict())
    assert opt64.state[p64]["drift"].dtype == torch.float64 and float(opt64.state[p64]["drift"]) > DRIFT_MAX
    p64.grad = torch.randn_like(p64)
    opt64.step()  # a point on the manifold: its new drift is at rounding level, or 0 when corrected
    assert float(opt64.state[p64]["drift"]) < 1e-12


def test_a_tied_parameter_listed_twice_round_trips():
    """torch warns about a parameter listed twice in a group and steps it; its state dict must load back (the
    alias check compares state, not the parameters the caller owns)."""
    p = torch.nn.Parameter(_point())
    with pytest.warns(UserWarning):
        opt = ManifoldMuon([p, p], lr=0.05)
    p.grad = torch.randn_like(p)
    opt.step()
    opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    m = torch.nn.Parameter(torch.randn(5, 3))
    with pytest.warns(UserWarning):
        muon = Muon([m, m], lr=0.1)
    m.grad = torch.randn_like(m)
    muon.step()
    muon.load_state_dict(copy.deepcopy(muon.state_dict()))


def test_strided_aliases_expanded_buffers_and_shared_solver_dicts_are_refused():
    """W and W.mT share every entry but not a layout; an expand()ed buffer cannot be written in place (it used to
    fail inside torch after W was written); one solver dict for two parameters would warm-start both from it."""
    W, W2 = _point(4, 0), _point(4, 1)
    g = [torch.ones_like(W)]
    _unchanged_after(lambda: manifold_muon([W], g, [W.mT], correct=True, **KW), [W], ValueError,  # noqa: E731
                     r"params\[0\] .* and momentum_buffers\[0\] .* share memory")
    B = torch.zeros(4, dtype=torch.float64).expand(4, 4)
    _unchanged_after(lambda: manifold_muon([W], g, [B], correct=True, **KW), [W], ValueError,  # noqa: E731
                     r"momentum_buffers\[0\] .* entries that share memory")
    shared: dict = {}
    call = lambda: manifold_muon([W, W2], g * 2, [torch.zeros_like(W), torch.zeros_like(W2)], [shared, shared],  # noqa: E731
                                 correct=True, **KW)
    _unchanged_after(call, [W, W2], ValueError, r"solver_states\[0\] and solver_states\[1\] are one dict")


def test_meta_tensors_are_not_taken_for_aliases():
    """Meta tensors have no memory (every data pointer is 0): the alias check skips them."""
    from svmuon.optim.functional import _check_disjoint

    metas = [torch.empty(4, 4, device="meta") for _ in range(3)]
    _check_disjoint(None, None, params=metas[:2], momentum_buffers=metas[1:])


def test_a_drift_of_the_wrong_kind_in_the_optimizer_state_is_named():
    p, opt = _stepped()
    opt.state[p]["drift"] = torch.zeros(3, dtype=torch.float64)
    _unchanged_after(opt.step, [p], ValueError, r"the drift of parameter .* must be a 0-d floating-point tensor")


def test_manifold_muon_updates_commits_into_a_parameter_outside_no_grad():
    from svmuon.optim.functional import manifold_muon_updates

    a, b = _point(4, 0), torch.nn.Parameter(_point(3, 1))
    plan = manifold_muon_updates([a, b], [torch.randn_like(a), torch.randn_like(b)],
                                 [torch.zeros_like(a), torch.zeros_like(b)], correct=True, **KW)
    plan.verify()
    plan.commit()
    assert b.grad_fn is None and not torch.equal(a, _point(4, 0))


def test_a_failed_flag_without_a_cause_is_never_committed():
    plan = StepPlan("Test")
    target = torch.zeros(2)
    plan.write(target, torch.ones(2))
    plan.add_batch(["a"], [torch.zeros(1, 2)], on_manifold=torch.tensor([[False]]), defect=torch.zeros(1, 1),
                   tolerance=torch.ones(1, 1))
    with pytest.raises(RuntimeError, match="no cause found"):
        plan.verify()
    assert not target.any()


def test_every_refusal_ends_with_the_count_of_the_others():
    from svmuon.optim.plan import raise_for

    with pytest.raises(NonFiniteUpdateError, match=r"was changed \(2 more parameters were refused too\)$"):
        raise_for("Test", [("nonfinite", f"p{i}", None, None, None) for i in range(3)])
    with pytest.raises(ValueError, match=r"was changed \(1 more parameter was refused too\)$"):
        raise_for("Test", [("hyper", "lr", -1.0, None, None), ("nonfinite", "p", None, None, None)])
    # a NaN lr in two groups refuses both groups' parameters: one more hyperparameter, two parameters
    failures = [("hyper", "lr0", float("nan"), None, None), ("hyper", "lr1", float("nan"), None, None),
                ("nonfinite", "p0", None, None, None), ("nonfinite", "p1", None, None, None)]
    with pytest.raises(ValueError, match=r"\(2 more parameters were refused too; 1 more hyperparameter was refused "
                                         r"too\)$"):
        raise_for("Test", failures)
    with pytest.raises(OffManifoldError, match=r"changed$"):  # one parameter refused for two causes: no others
        raise_for("Test", [("off_manifold", "p", 1.0, 0.1, None), ("drift", "p", 0.2, 0.1, None)])


def _views():
    base, base3 = torch.zeros(12, 10), torch.zeros(4, 6, 5)
    return [base, base.T, base[:, ::2], base[:, 1::2], base[2:5], base[:, 3:7], base[:, 7:], base[::3, ::3],
            base[1::3, ::3], base.T[2:4], base[:, :5].T, base.reshape(-1)[5:40], base[0], base[:, 0], base[5:, 5:],
            base3, base3.permute(2, 0, 1), base3[:, ::2], base3[1:3, :, 1:4], base3.transpose(0, 1)[::2]]


def test_the_overlap_test_agrees_with_the_sets_of_element_offsets():
    """The element-by-element test (offsets of one view decomposed along the other's strides, in chunks) against
    the independent route: the sets of element offsets themselves, built by as_strided, for every pair of views of
    one storage whose spans meet (slices, steps, transposes, permutations; a chunk of 7 elements exercises the
    chunking)."""
    from svmuon.optim._batching import _overlap

    def offsets(t):
        extent = t.storage_offset() + 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
        return set(torch.arange(extent).as_strided(t.shape, t.stride(), t.storage_offset()).reshape(-1).tolist())

    checked, views = 0, _views()
    for a in views:
        for b in views:
            if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
                continue
            oa, ob = offsets(a), offsets(b)
            if min(ob) > max(oa) or min(oa) > max(ob):  # spans apart: the caller never asks
                continue
            assert _overlap(a, b, chunk=7) == bool(oa & ob), (a.shape, a.stride(), b.shape, b.stride())
            checked += 1
    assert checked > 100
    weird = torch.zeros(20).as_strided((3, 3), (2, 1))  # rows that overlap themselves: counted as overlapping
    assert _overlap(torch.zeros(20)[::5], weird)
