"""Bad input and degenerate cases found by a review (session 13): the raw Stiefel direction of a gradient without a
tangent part, a loaded ManifoldMuon drift, Muon's decoupled decay factor, and a NaN Marchenko–Pastur point."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from svmuon import ManifoldMuon, Muon, Stiefel, stiefel_direction
from svmuon.optim import NonFiniteUpdateError
from svmuon.optim.plan import OffManifoldError
from svmuon.orthogonal.stiefel import tangent_residual
from svmuon.orthogonal.stiefel.options import SOLVERS
from svmuon.spectral.random_matrix import gaussian_entropy_limit, marchenko_pastur_pdf

F64 = torch.float64
St = Stiefel()


# -- 1. stiefel_direction of a G without tangent part --------------------------------------------------------------
def _normal_gradient(gen, m, n, dtype):
    W = St.random(m, n, generator=gen, dtype=F64)
    S = torch.randn(n, n, generator=gen, dtype=F64)
    return W.to(dtype), (W @ (S + S.T)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("shape", [(9, 4), (5, 5)], ids=["tall", "square"])
def test_a_gradient_without_tangent_part_gives_zero_and_converges(solver, dtype, shape, gen):
    # before: newton, fixed_point, fixed_point_reduced, dual_ascent and amortized returned converged=False and a Φ
    # with tangent residual 1.5-3.5 (‖Φ‖₂ up to 1.5) for G = W(S + Sᵀ); completion a unit Φ made of rounding noise.
    # Every feasible Φ has the value ⟨W(S + Sᵀ), Φ⟩ = tr((S + Sᵀ) WᵀΦ) = 0 (WᵀΦ skew): Φ = 0 is the optimum of
    # least norm, and X = -[WᵀG]_sym makes G + WX = 0 (a dual point with the same value 0)
    W, G = _normal_gradient(gen, *shape, dtype)
    for g in (G, torch.zeros_like(G)):
        sol = stiefel_direction(W, g, solver=solver)
        assert sol.converged
        assert not bool(sol.Phi.any()) and float(sol.residual) == 0.0
        assert float(tangent_residual(W, sol.Phi)) == 0.0 and sol.Phi.dtype == dtype
        S = (W.double().T @ g.double() + g.double().T @ W.double()) / 2  # float64 reference of [WᵀG]_sym
        # an m-term product in G's dtype: entries within m u ‖W‖_F ‖G‖_F of the float64 one (γ_m bound, u = eps/2)
        bound = shape[0] * torch.finfo(dtype).eps * float(W.double().norm() * g.double().norm())
        assert float((sol.X + S).abs().max()) <= bound
        if sol.Y is not None:
            assert not bool(sol.Y.any())
        if sol.gap is not None:
            assert float(sol.gap) == 0.0


def test_numpy_input_and_a_mixed_batch(gen):
    # a batch of a normal and a generic gradient: only the first is treated as having no tangent part; the second
    # keeps the solver's own answer (the same problem solved alone: an independent call)
    W, Gn = _normal_gradient(gen, 8, 3, F64)
    Gg = torch.randn(8, 3, generator=gen, dtype=F64)
    both = stiefel_direction(W.expand(2, 8, 3), torch.stack([Gn, Gg]), solver="newton")
    alone = stiefel_direction(W, Gg, solver="newton")
    assert both.converged and alone.converged
    assert not bool(both.Phi[0].any())
    # the same Newton iterations on the same matrix, batched or not: to the solver's tol (1e-6 on the residual,
    # and Φ is a smooth function of the iterate) with room for the different product order
    assert float((both.Phi[1] - alone.Phi).abs().max()) <= 1e-6
    assert float(torch.linalg.matrix_norm(alone.Phi, 2)) == pytest.approx(1.0, abs=1e-6)  # on the unit sphere (tol)
    sol = stiefel_direction(W.numpy(), Gn.numpy(), solver="dual_ascent")
    assert isinstance(sol.Phi, np.ndarray) and sol.converged and not sol.Phi.any()


@pytest.mark.parametrize("solver", ["newton", "completion"])
def test_the_threshold_is_sqrt_eps_of_the_tangent_part(solver, gen):
    # G = W(S + Sᵀ) + t·T, T a unit tangent matrix: at t = 4√eps ‖G‖_F a unit direction (the optimum is on the unit
    # sphere: the value is linear), at t = √eps/4 ‖G‖_F zero; this fails if the threshold moves by 4x either way
    W, N = _normal_gradient(gen, 10, 4, F64)
    T = St.tangent(W[None], torch.randn(1, 10, 4, generator=gen, dtype=F64))[0]
    T = T / T.norm()
    root = math.sqrt(torch.finfo(F64).eps)
    big = stiefel_direction(W, N + 4 * root * float(N.norm()) * T, solver=solver)
    small = stiefel_direction(W, N + root / 4 * float(N.norm()) * T, solver=solver)
    assert big.converged and small.converged
    assert float(torch.linalg.matrix_norm(big.Phi, 2)) == pytest.approx(1.0, abs=1e-6)  # the solver's tol
    assert not bool(small.Phi.any())


# -- 2. ManifoldMuon: a loaded drift ---------------------------------------------------------------------------------
def _stiefel_opt(gen, **kw):
    p = torch.nn.Parameter(St.random(6, 4, generator=gen, dtype=F64))
    opt = ManifoldMuon([p], lr=0.1, manifold=Stiefel(), **kw)
    p.grad = torch.randn(6, 4, generator=gen, dtype=F64)
    opt.step()
    return p, opt


@pytest.mark.parametrize("bad", [0.4, 0.11, math.inf, math.nan, -1e-12], ids=str)
def test_a_drift_above_its_ceiling_is_refused_and_changes_nothing(bad, gen):
    p, opt = _stiefel_opt(gen)
    before_p, before = p.detach().clone(), copy.deepcopy(opt.state_dict())
    sd = copy.deepcopy(opt.state_dict())
    sd["state"][0]["drift"] = torch.tensor(bad, dtype=F64)
    sd["param_groups"][0]["momentum"] = 0.5  # a valid change that must not be half-applied either
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['params'\]\[0\].*drift must be"):
        opt.load_state_dict(sd)
    after = opt.state_dict()
    assert torch.equal(p.detach(), before_p) and after["param_groups"] == before["param_groups"]
    for key in ("momentum_buffer", "drift"):
        assert torch.equal(after["state"][0][key], before["state"][0][key])


@pytest.mark.parametrize("bad", [0.0, torch.zeros(2, dtype=F64), "0"], ids=["float", "two", "str"])
def test_a_drift_that_is_not_a_real_one_element_tensor_is_refused(bad, gen):
    # (torch's load_state_dict casts a tensor of another dtype, complex or integer, to the parameter's first)
    p, opt = _stiefel_opt(gen)
    sd = copy.deepcopy(opt.state_dict())
    sd["state"][0]["drift"] = bad
    with pytest.raises(ValueError, match="drift must be"):
        opt.load_state_dict(sd)


def test_a_drift_at_the_ceiling_loads_and_the_check_stays_on(gen):
    # 2.1e-2 (the largest drift the recorded orthogonal-drift experiment's uncorrected runs left) and the ceiling
    # 0.1 load (and so does 0); the step's check then accepts a defect up to 2 (atol + 0.1) + slack ≈ 0.2, so a
    # point scaled by 0.6 (defect |0.36 - 1| = 0.64) is refused. With the corrupted 0.4 of the review the
    # tolerance was 0.8 and the same point passed
    p, opt = _stiefel_opt(gen)
    for ok in (0.0, 2.1e-2, 0.1):
        sd = copy.deepcopy(opt.state_dict())
        sd["state"][0]["drift"] = torch.tensor(ok, dtype=F64)
        opt.load_state_dict(sd)
        assert float(opt.state[p]["drift"]) == ok
    with torch.no_grad():
        p.mul_(0.6)
    p.grad = torch.randn(6, 4, generator=gen, dtype=F64)
    with pytest.raises(OffManifoldError):
        opt.step()


def test_a_drift_the_optimizer_wrote_itself_round_trips(gen):
    # polar_every=0: the drift is the defect the step left (float64 rounding, ~1e-15), far below the ceiling
    p, opt = _stiefel_opt(gen, polar_every=0)
    sd = copy.deepcopy(opt.state_dict())
    opt.load_state_dict(sd)
    assert torch.equal(opt.state[p]["drift"], sd["state"][0]["drift"])


# -- 3. Muon: the decoupled decay factor ----------------------------------------------------------------------------
def _torch_refuses(decay: float, dtype: torch.dtype) -> bool:
    """The independent route: whether the step's own operation, ``W'.add_(W, alpha=1 - lr·wd)`` in the parameter's
    dtype, fails (torch's overflow RuntimeError) or gives a non-finite result."""
    try:
        out = torch.zeros(1, dtype=dtype).add_(torch.ones(1, dtype=dtype), alpha=decay)
    except RuntimeError:
        return True
    return not bool(torch.isfinite(out).all())


@pytest.mark.parametrize("lr, wd", [(1e30, 1e10), (1.0, 1e39), (1e20, 1e20), (1e200, 1e200), (1e-3, 0.1),
                                    (1e18, 1e20), (1e30, 0.0)])
@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.bfloat16], ids=["f32", "f64", "bf16"])
def test_muon_refuses_a_decay_factor_its_step_cannot_apply(lr, wd, dtype, gen):
    # before: torch's "value cannot be converted to type float without overflow" RuntimeError at step time
    refuse = _torch_refuses(1.0 - lr * wd, dtype)
    p = torch.nn.Parameter(torch.randn(4, 3, generator=gen).to(dtype))
    if refuse:
        with pytest.raises(ValueError, match=r"lr = .* and weight_decay = .*decay factor"):
            Muon([p], lr=lr, weight_decay=wd)
        return
    opt = Muon([p], lr=lr, weight_decay=wd)
    p.grad = torch.randn(4, 3, generator=gen).to(dtype)
    try:
        opt.step()
    except NonFiniteUpdateError:  # a finite factor may still overflow the weights themselves: refused as such
        pass


def test_muon_refuses_a_decay_set_after_construction_and_changes_nothing(gen):
    p = torch.nn.Parameter(torch.randn(4, 3, generator=gen))
    opt = Muon([p], lr=1e-3, weight_decay=0.1)
    p.grad = torch.randn(4, 3, generator=gen)
    opt.step()
    before_p, before = p.detach().clone(), copy.deepcopy(opt.state_dict())
    for change in (dict(lr=1e30, weight_decay=1e10), dict(lr=1e-3, weight_decay=1e42)):
        opt.param_groups[0].update(change)
        with pytest.raises(ValueError, match=r"param_groups\[0\].*lr = .* and weight_decay = "):
            opt.step()
        assert torch.equal(p.detach(), before_p)
        assert torch.equal(opt.state[p]["momentum_buffer"], before["state"][0]["momentum_buffer"])
    opt.param_groups[0].update(lr=1e-3, weight_decay=0.1)
    opt.step()  # still usable


def test_muon_refuses_a_tensor_lr_whose_decay_overflows_within_the_step(gen):
    # a tensor lr is read at construction, and at a step only with the step's one synchronisation
    p = torch.nn.Parameter(torch.randn(4, 3, generator=gen))
    with pytest.raises(ValueError, match="weight_decay"):
        Muon([p], lr=torch.tensor(1e30), weight_decay=1e10)
    lr = torch.tensor(1e-3)
    opt = Muon([p], lr=lr, weight_decay=1e10)
    p.grad = torch.randn(4, 3, generator=gen)
    opt.step()
    before_p = p.detach().clone()
    lr.fill_(1e30)  # a scheduler's in-place change
    with pytest.raises(ValueError, match=r"1 - lr·weight_decay.*float32") as info:
        opt.step()
    assert type(info.value) is ValueError  # the cause, not the NonFiniteUpdateError it leads to
    assert torch.equal(p.detach(), before_p)


def test_muon_load_state_dict_refuses_an_overflowing_decay(gen):
    p = torch.nn.Parameter(torch.randn(4, 3, generator=gen))
    opt = Muon([p], lr=1e-3, weight_decay=0.1)
    sd = copy.deepcopy(opt.state_dict())
    sd["param_groups"][0]["lr"] = 1e30
    sd["param_groups"][0]["weight_decay"] = 1e10
    with pytest.raises(ValueError, match="weight_decay"):
        opt.load_state_dict(sd)
    assert opt.param_groups[0]["lr"] == 1e-3 and opt.param_groups[0]["weight_decay"] == 0.1


# -- 4. marchenko_pastur_pdf: NaN ----------------------------------------------------------------------------------
def test_marchenko_pastur_pdf_refuses_nan_as_the_module_does():
    # before: marchenko_pastur_pdf(nan) returned 0, as if NaN were outside the support; the module's other
    # functions refuse a NaN argument with a ValueError (gaussian_entropy_limit's aspect_ratio, q and power)
    with pytest.raises(ValueError, match="aspect_ratio"):
        gaussian_entropy_limit(math.nan)
    for x in (math.nan, [0.5, math.nan], np.full((2, 2), np.nan)):
        with pytest.raises(ValueError, match="x holds .* NaN"):
            marchenko_pastur_pdf(x, 0.5)
    for x in (1 + 1j, "0.5", None, True):
        with pytest.raises(TypeError, match="x must"):
            marchenko_pastur_pdf(x, 0.5)


def test_marchenko_pastur_pdf_values_beside_the_new_check():
    # λ = 1: the singular values s = √x follow the quarter circle √(4 - s²)/π (module docstring), so the density of
    # x = s² is √(4 - x) / (2π √x), a different formula from the code's; ±inf lie outside the support: 0
    x = np.array([0.25, 1.0, 3.0, 3.99])
    expected = np.sqrt(4 - x) / (2 * np.pi * np.sqrt(x))
    np.testing.assert_allclose(marchenko_pastur_pdf(x, 1.0), expected, rtol=1e-13)  # a few float64 roundings
    np.testing.assert_array_equal(marchenko_pastur_pdf([math.inf, -math.inf, 5.0], 1.0), 0.0)
    assert marchenko_pastur_pdf(np.float32(1.0), 1.0).dtype == np.float64
