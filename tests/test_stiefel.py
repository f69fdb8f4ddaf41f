"""Tests of svmuon.Stiefel (the manifold) and ManifoldMuon(manifold=Stiefel()) (the optimizer on it).

Independent routes: scipy's polar decomposition for nearest points and the polar retraction, the
orthogonal group's closed form for m = n, the SDP answer key for the direction (tests/test_stiefel_solvers.py),
and per-parameter stepping for batched stepping.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import scipy.linalg
import torch

from svmuon import ManifoldMuon, Orthogonal, Stiefel
from svmuon.optim import NonFiniteUpdateError
from svmuon.orthogonal.stiefel import tangent_residual

M = Stiefel()


def _point(gen, *shape, dtype=torch.float64):
    return M.project(torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)


def _polar(A):
    """Orthonormal polar factor by scipy (an independent route)."""
    if A.shape[0] < A.shape[1]:
        return _polar(A.T).T
    U, _ = scipy.linalg.polar(A)
    return U


# -- the manifold ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(9, 4), (4, 9), (6, 6)])
def test_project_is_the_polar_factor_and_a_point(shape, gen):
    B = torch.randn(*shape, generator=gen, dtype=torch.float64)
    W = M.project(B)
    # polar factors by two SVD routes: n u ‖B‖/σ_min(B) ~ 1e-14 (measured <= 4.2e-15 over 600 draws)
    np.testing.assert_allclose(W.numpy(), _polar(B.numpy()), rtol=0, atol=1e-12)
    assert M.check_point(W, atol=1e-13)
    # LAPACK's U, V orthonormal to ~(m + n) u = 1.4e-15 each; measured <= 3.1e-15 over 600 draws
    assert float(M.defect(W)) <= 1e-14


def test_wide_points_need_transpose_wide():
    W = M.project(torch.randn(3, 8, dtype=torch.float64))
    assert M.check_point(W)  # rows orthonormal
    strict = Stiefel(transpose_wide=False)
    assert not strict.check_point(W)
    for call in (lambda: strict.defect(W), lambda: strict.steepest_direction(W, W), lambda: strict.project(W)):
        with pytest.raises(ValueError, match="m >= n"):
            call()


def test_tangent_projection(gen):
    W = _point(gen, 10, 4)
    Z = torch.randn(10, 4, generator=gen, dtype=torch.float64)
    P = M.project_tangent(W, Z)
    # rounding: P = Z - W[WᵀZ]_sym and then WᵀP take three m-term products (γ_m = m u per entry, u = 1.1e-16)
    # and an n-term one, and W's own defect enters as (I - WᵀW)[WᵀZ]_sym: ‖WᵀP + PᵀW‖_F <= 2((3m + n) u + defect)
    # ‖Z‖_F = 6.5e-14 here (measured up to 1.0e-14 over 200 draws; it was 1e-14, tuned to one draw)
    m, n = W.shape
    bound = 2 * ((3 * m + n) * torch.finfo(torch.float64).eps / 2 + float(M.defect(W))) * float(Z.norm())
    assert float(tangent_residual(W, P)) <= bound
    torch.testing.assert_close(M.project_tangent(W, P), P, rtol=0, atol=bound)  # idempotent (measured <= 2.4e-15)
    D = M.project_tangent(W, torch.randn(10, 4, generator=gen, dtype=torch.float64))
    # Z - P is normal: orthogonal to every tangent vector. The mn-term sum adds mn u ‖Z - P‖_F ‖D‖_F to the errors of
    # P and D (the bound above each, times the other's norm): 8e-13 here, measured <= 7e-15 over 200 draws
    normal = (m * n * torch.finfo(torch.float64).eps / 2 + 2 * bound / float(Z.norm())) * float(Z.norm() * D.norm())
    assert abs(float(((Z - P) * D).sum())) <= normal


@pytest.mark.parametrize("shape", [(9, 4), (4, 9), (3, 7, 2)])
def test_steepest_direction_is_tangent_unit_and_beats_the_tangent_projection(shape, gen):
    W = _point(gen, *shape)
    G = torch.randn(*shape, generator=gen, dtype=torch.float64)
    Phi = M.steepest_direction(W, G, tol=1e-10)
    assert Phi.shape == G.shape
    Wt, Pt = (W, Phi) if shape[-2] >= shape[-1] else (W.mT, Phi.mT)
    # the solver's stopping rule tol = 1e-10, plus the float64 assembly of Φ
    assert float(tangent_residual(Wt, Pt).max()) <= 1e-9
    assert float(torch.linalg.matrix_norm(Phi, 2).max()) <= 1 + 1e-9
    # any other unit tangent direction does no better, e.g. the normalised projection and the square trick
    T = M.project_tangent(W, G)
    T = T / torch.linalg.matrix_norm(T, 2)[..., None, None]
    assert bool(((G * Phi).sum((-2, -1)) >= (G * T).sum((-2, -1)) - 1e-12).all())


def test_square_stiefel_is_the_orthogonal_group(gen):
    W = _point(gen, 5, 5)
    G = torch.randn(5, 5, generator=gen, dtype=torch.float64)
    # m = n: both are the closed form W msign([WᵀG]_skew), from two SVDs: ~n u / σ_min(K) ~ 1e-15 apart
    torch.testing.assert_close(M.steepest_direction(W, G), Orthogonal().steepest_direction(W, G), rtol=0, atol=1e-12)


def test_retractions_are_the_polar_retraction(gen):
    W = _point(gen, 9, 4)
    G = torch.randn(9, 4, generator=gen, dtype=torch.float64)
    Phi = M.steepest_direction(W, G, tol=1e-12)
    for eta in (0.0, 0.1, 1.0, 5.0):
        expected = torch.from_numpy(_polar((W - eta * Phi).numpy()))
        # two routes to the polar factor of W - ηΦ (σ in [1, √(1+η²)], η <= 5): n u κ ~ 1e-14 apart
        torch.testing.assert_close(M.retract(W, -eta * Phi), expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(M.retract_along(W, Phi, eta), expected, rtol=0, atol=1e-12)
    # for a partial isometry the closed form of the source holds (thm-stiefel-retraction)
    P = Phi.mT @ Phi
    eta, s = 0.3, 1 / np.sqrt(1 + 0.3**2)
    closed = (W - eta * Phi) @ (torch.eye(4, dtype=torch.float64) - P + s * P)
    # Φ_ε is a partial isometry up to the smoothing: ΦᵀΦ's eigenvalues are 1 - O(ε²/σ²), far below 1e-9
    torch.testing.assert_close(M.retract_along(W, Phi, eta), closed, rtol=0, atol=1e-9)


def test_retract_along_a_direction_that_is_not_a_partial_isometry():
    # at a non-smooth optimum (odd m, near-square) Φ has a singular value inside (0, 1): the source's closed
    # form (W - ηΦ)/√(1+η²) leaves the manifold, the polar retraction does not
    W = M.project(torch.randn(7, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64))
    G = torch.randn(7, 5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    Phi = M.steepest_direction(W, G, tol=1e-10, max_iter=200)
    s = torch.linalg.svdvals(Phi)
    assert 0.05 < float(s.min()) < 0.95  # this draw (seeds 3, 4) has a non-smooth optimum
    naive = (W - 0.5 * Phi) / np.sqrt(1 + 0.25)
    assert float(M.defect(naive)) > 1e-3
    assert float(M.defect(M.retract_along(W, Phi, 0.5))) <= 1e-13  # rounding: a few hundred ulps


def test_bad_input_gives_clear_errors(gen):
    W = _point(gen, 6, 3)
    G = torch.randn(6, 3, generator=gen, dtype=torch.float64)
    with pytest.raises(ValueError, match="not a point of St"):
        M.steepest_direction(2 * W, G)
    with pytest.raises(ValueError, match="same matrix shape"):
        M.steepest_direction(W, G[:5])
    bad = G.clone()
    bad[1, 1] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        M.steepest_direction(W, bad)
    with pytest.raises(ValueError, match="finite"):
        M.project(bad)
    with pytest.raises(ValueError, match="solver"):
        Stiefel(solver="nope")
    with pytest.raises(ValueError, match="tol"):
        Stiefel(tol=-1.0)
    with pytest.raises(TypeError):
        M.project([[1.0, 0.0]])


def test_numpy_in_numpy_out(gen):
    W = _point(gen, 8, 3).numpy()
    G = np.random.default_rng(0).standard_normal((8, 3))
    for out in (M.steepest_direction(W, G), M.project(G), M.project_tangent(W, G), M.retract_along(W, W, 0.1)):
        assert isinstance(out, np.ndarray) and out.shape == (8, 3)


# -- the optimizer -------------------------------------------------------------------------------------------------
def _run(opt, params, steps, gen):
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
        opt.step()


def _params(gen, dtype, shapes):
    return [torch.nn.Parameter(_point(gen, *s, dtype=dtype)) for s in shapes]


@pytest.mark.parametrize("solver", ["completion", "newton"])
def test_tall_and_wide_parameters_stay_on_the_manifold(solver, gen):
    ps = _params(gen, torch.float32, [(12, 5), (5, 12), (2, 9, 4)])
    opt = ManifoldMuon(ps, lr=0.05, manifold=Stiefel(solver=solver))
    _run(opt, ps, 30, gen)
    for p in ps:
        # float32: the retraction is the polar factor of the actual W - ηΦ, so each step leaves rounding only
        # (a few eps √n); 1e-5 is the book's float32 target
        assert float(M.defect(p.detach()).max()) <= 1e-5
        if solver == "newton":
            assert opt.state[p]["solver"]["Y"].shape[-1] == min(p.shape[-2:])
            assert float(opt.state[p]["info"]["residual"].max()) <= 1e-5  # default_tol(float32, n <= 5) = 1e-6
        else:  # the completion's certificate: an upper bound on its relative optimality gap (~5 % on Gaussians)
            assert 0 <= float(opt.state[p]["info"]["gap"].max()) <= 0.5


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(16, 6), (6, 16), (10, 9)], ids=["tall", "wide", "near_square"])
def test_float32_stays_on_the_manifold_for_thousands_of_steps(shape, gen):
    # the hard target: max|WᵀW - I| <= 1e-5 in float32 over thousands of steps (here 2,000)
    ps = _params(gen, torch.float32, [shape])
    # the solver is capped (max_iter=5): the defect depends on the retraction, which is exact for any Φ
    opt = ManifoldMuon(ps, lr=0.05, momentum=0.9, manifold=Stiefel(max_iter=5))
    _run(opt, ps, 2000, gen)
    assert float(M.defect(ps[0].detach())) <= 1e-5


@pytest.mark.slow  # 2.1-3.3 s of CPU each (one thread, the shared 2-core machine): 300 steps with autograd
@pytest.mark.parametrize("shape,dtype", [((10, 4), torch.float64), ((4, 10), torch.float64),
                                         ((10, 4), torch.float32), ((4, 10), torch.float32),
                                         ((10, 9), torch.float64)],
                         ids=["tall", "wide", "tall_float32", "wide_float32", "near_square"])
def test_reaches_the_nearest_point(shape, dtype, gen):
    # minimise ‖W - B‖_F² on St: the answer is msign(B) (the polar factor); B with singular values in [1, 2]
    # (a well-conditioned optimum, so a decaying step reaches it quickly)
    k = min(shape)
    U = _polar(torch.randn(max(shape), k, generator=gen, dtype=torch.float64).numpy())
    V = _polar(torch.randn(k, k, generator=gen, dtype=torch.float64).numpy())
    B = U @ np.diag(np.linspace(1.0, 2.0, k)) @ V.T
    B = torch.from_numpy(B if shape[0] >= shape[1] else B.T.copy())
    answer = torch.from_numpy(_polar(B.numpy()))
    B = B.to(dtype)
    W = torch.nn.Parameter(_point(gen, *shape, dtype=dtype))
    opt = ManifoldMuon([W], lr=0.1, momentum=0.5, manifold=Stiefel(), msign_method="svd")
    for k in range(300):
        opt.zero_grad()
        ((W - B) ** 2).sum().backward()
        opt.step()
        for group in opt.param_groups:
            group["lr"] = 0.1 * 0.98**k  # a fixed spectral step oscillates at distance ~lr
    torch.testing.assert_close(W.detach().double(), answer, rtol=0, atol=1e-3)
    assert float(M.defect(W.detach())) <= (1e-12 if dtype == torch.float64 else 1e-5)


def test_two_steps_match_the_formula_with_tangent_momentum(gen):
    # the momentum buffer is kept tangent (projection transport): B' = P_W(μB + (1-μ)g) at the point W before the
    # step, and U = (1-μ)g + μB'; each step is the polar retraction (scipy) of -ηΦ with Φ the SDP's steepest
    # direction (cvxpy) for U
    from svmuon.orthogonal.references import stiefel_direction_sdp

    def tangent(W, Z):  # the projection onto the tangent space at W, written out
        S = W.T @ Z
        return Z - W @ (S + S.T) / 2

    lr, mu = 0.2, 0.8
    W = torch.nn.Parameter(_point(gen, 9, 4))
    opt = ManifoldMuon([W], lr=lr, momentum=mu, manifold=Stiefel(solver="newton", tol=1e-12), polar_every=0)
    Wk, B = W.detach().clone(), torch.zeros(9, 4, dtype=torch.float64)
    for _ in range(2):
        g = torch.randn(9, 4, generator=gen, dtype=torch.float64)
        W.grad, W_before = g.clone(), W.detach().clone()
        opt.step()
        B = tangent(W_before, mu * B + (1 - mu) * g)
        torch.testing.assert_close(opt.state[W]["momentum_buffer"], B, rtol=0, atol=1e-14)  # a few roundings
        U = (1 - mu) * g + mu * B
        Phi, _ = stiefel_direction_sdp(Wk.numpy(), U.numpy())
        Wk = torch.from_numpy(_polar((Wk - lr * torch.from_numpy(Phi)).numpy()))
        torch.testing.assert_close(W.detach(), Wk, rtol=0, atol=2e-6)  # the SDP solver's accuracy


def test_batched_equals_separate(gen):
    ps = _params(gen, torch.float64, [(9, 4), (9, 4), (4, 9)])
    qs = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    opt = ManifoldMuon(ps, lr=0.1, manifold=Stiefel(tol=1e-10), msign_method="svd")
    opts = [ManifoldMuon([q], lr=0.1, manifold=Stiefel(tol=1e-10), msign_method="svd") for q in qs]
    for _ in range(3):
        for p, q in zip(ps, qs):
            p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            q.grad = p.grad.clone()
        opt.step()
        for o in opts:
            o.step()
    for p, q in zip(ps, qs):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-10)  # solver tolerance, amplified by a few steps


def test_state_dict_round_trip_keeps_the_warm_start(gen):
    ps = _params(gen, torch.float32, [(12, 5), (5, 12)])
    opt = ManifoldMuon(ps, lr=0.05, manifold=Stiefel(solver="newton"))
    _run(opt, ps, 3, gen)
    saved = copy.deepcopy(opt.state_dict())
    assert all(float(s["solver"]["warm"]) == 1.0 and s["solver"]["Y"].abs().sum() > 0 for s in saved["state"].values())
    clone = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    opt2 = ManifoldMuon(clone, lr=0.05, manifold=Stiefel(solver="newton"))
    opt2.load_state_dict(saved)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    _run(opt, ps, 4, g1)
    _run(opt2, clone, 4, g2)
    for p, q in zip(ps, clone):
        assert torch.equal(p, q)  # bitwise: same state, same arithmetic


def test_refuses_bad_starting_points():
    # the rest (points off the manifold, NaN, dtypes) is in tests/test_optimizer_properties.py
    with pytest.raises(ValueError, match="m >= n"):
        ManifoldMuon([torch.nn.Parameter(torch.eye(3, 6, dtype=torch.float64))], lr=0.1,
                     manifold=Stiefel(transpose_wide=False))


def test_warm_start_is_the_previous_multiplier(gen):
    # with lr = 0 the point stays and the update keeps its direction (the momentum buffer only grows): from the
    # second step on, the stored multiplier (kept per unit update norm) is the answer and no iteration is needed
    p = torch.nn.Parameter(_point(gen, 64, 16))
    opt = ManifoldMuon([p], lr=0.0, momentum=0.9, nesterov=False, manifold=Stiefel(solver="newton", tol=1e-8),
                       msign_method="svd")
    G = torch.randn(64, 16, generator=gen, dtype=torch.float64)
    its = []
    for _ in range(3):
        p.grad = G.clone()
        opt.step()
        its.append(float(opt.state[p]["info"]["iterations"]))
    assert its[0] >= 3 and its[1] == its[2] == 0


def test_warm_start_in_y_beats_x(gen):
    # The optimizer warm-starts from the reduced multiplier Y = [WᵀU]_sym + X of the previous step, not from X:
    # the optimum in Y depends on the tangent part of U only, while X also tracks -[WᵀU]_sym, which moves with
    # W and with the normal part of U. Simulated run of ManifoldMuon's loop (momentum 0.95, gradients = a fixed
    # field + noise of the same size, polar retraction of -0.05Φ): the residual the first Newton iteration
    # starts from, and the iterations to 1e-8, summed over 25 steps, with each warm start. Measured (seeds
    # 0-5): Y's starting residuals sum to 0.37-0.41 of X's (0.55-0.67 of the cold start's), with 12-19 % fewer
    # iterations than X; the bounds leave room for other seeds.
    from svmuon.orthogonal.stiefel import StiefelOptions
    from svmuon.orthogonal.stiefel.dispatch import solve as _solve

    solve = lambda W, U, **kw: _solve(W, U, StiefelOptions(solver="newton"), **kw)  # noqa: E731
    m, n = 48, 12
    W = _point(gen, m, n)
    field = torch.randn(m, n, generator=gen, dtype=torch.float64)
    B = torch.zeros(m, n, dtype=torch.float64)
    prev = None  # (X, Y) per unit update norm
    start = {"X": 0.0, "Y": 0.0}
    its = {"X": 0, "Y": 0}
    for t in range(26):
        g = field + torch.randn(m, n, generator=gen, dtype=torch.float64)
        B = 0.95 * B + 0.05 * g
        U = 0.05 * g + 0.95 * B
        norm = torch.linalg.matrix_norm(U)
        if prev is not None:
            for name, kw in (("X", {"X0": prev[0] * norm}), ("Y", {"Y0": prev[1] * norm})):
                trace = []
                sol = solve(W, U, tol=1e-8, trace=trace, **kw)
                start[name] += trace[0]["residual"]
                its[name] += sol.iterations
        sol = solve(W, U, tol=1e-12)
        assert torch.allclose(sol.Y, sol.X + ((W.mT @ U) + (W.mT @ U).mT) / 2, atol=1e-12)
        prev = (sol.X / norm, sol.Y / norm)
        W = M.retract(W, -0.05 * sol.Phi)
    assert start["Y"] < 0.6 * start["X"], start
    assert its["Y"] < its["X"], its


@pytest.mark.parametrize("shape", [(256, 64), (512, 128)])
def test_float32_floor_of_the_assembled_direction(shape, gen):
    # default_tol's premise: a Φ assembled in float32 has a tangent residual of a few eps √n even when the
    # float64 dual is solved to 1e-12, so a float32 tolerance of 8 eps √n gives up less than a factor 3
    from svmuon.orthogonal.stiefel import StiefelOptions, default_tol
    from svmuon.orthogonal.stiefel.dispatch import solve as _solve

    def solve(W, G, *, tol, max_iter=None):
        return _solve(W, G, StiefelOptions(solver="newton", max_iter=max_iter), tol=tol)

    m, n = shape
    W = _point(gen, m, n, dtype=torch.float32)
    G = torch.randn(m, n, generator=gen, dtype=torch.float32)
    unit = torch.finfo(torch.float32).eps * n**0.5
    exact = solve(W, G, tol=1e-12, max_iter=100)
    floor = float(exact.residual)
    assert 1.0 * unit <= floor <= 6.0 * unit, floor / unit
    tol = default_tol(torch.float32, n)
    assert tol == pytest.approx(8 * unit) and default_tol(torch.float64, n) == 1e-6
    fast = solve(W, G, tol=tol)
    assert fast.converged and float(fast.residual) <= tol + floor  # the dual's part plus the assembly's
    assert fast.iterations <= exact.iterations


@pytest.mark.parametrize("manifold", [Stiefel(), Orthogonal()], ids=["stiefel", "orthogonal"])
def test_geometry_needs_a_point(manifold, gen):
    # the tangent projection, the steepest direction and the retractions are formulas valid at points only
    shape = (7, 3) if isinstance(manifold, Stiefel) else (4, 4)
    B = torch.randn(*shape, generator=gen, dtype=torch.float64)
    Z = torch.randn(*shape, generator=gen, dtype=torch.float64)
    for call in (lambda: manifold.project_tangent(B, Z), lambda: manifold.steepest_direction(B, Z),
                 lambda: manifold.retract(B, 0.1 * Z), lambda: manifold.retract_along(B, Z, 0.1)):
        with pytest.raises(ValueError, match="is not a point of"):
            call()


def test_retract_along_a_non_tangent_direction_is_the_nearest_point(gen):
    # the closed form assumes a tangent Φ; for any other Φ the result is the definition, msign(W - ηΦ)
    W = _point(gen, 9, 4)
    Z = torch.randn(9, 4, generator=gen, dtype=torch.float64)
    out = M.retract_along(W, Z, 0.3)
    assert float(M.defect(out)) <= 1e-12  # a polar factor by SVD: rounding, ~(m + n) u (measured ~3e-15)
    # two SVD routes to one polar factor, σ(W - 0.3Z) >= ~0.3: n u / σ_min ~ 1e-14
    torch.testing.assert_close(out, torch.from_numpy(_polar((W - 0.3 * Z).numpy())), rtol=0, atol=1e-12)


def test_corrupt_solver_state_is_refused_at_load(gen):
    ps = _params(gen, torch.float32, [(12, 5)])
    opt = ManifoldMuon(ps, lr=0.05, manifold=Stiefel(solver="newton"))
    _run(opt, ps, 2, gen)
    for key, value in (("Y", float("nan")), ("warm", float("inf"))):
        saved = copy.deepcopy(opt.state_dict())
        saved["state"][0]["solver"][key].fill_(value)
        with pytest.raises(ValueError, match=f"solver state '{key}' holds NaN or Inf"):
            opt.load_state_dict(saved)
    _run(opt, ps, 1, gen)  # the refused loads left the optimizer as it was


@pytest.mark.parametrize("solver", ["completion", "newton"])
@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_a_failed_factorisation_changes_nothing(policy, solver, gen, monkeypatch):
    # LAPACK may fail to converge (torch.linalg.LinAlgError); the step is then refused or skipped like a NaN
    ps = _params(gen, torch.float32, [(12, 5)])
    opt = ManifoldMuon(ps, lr=0.05, manifold=Stiefel(solver=solver), nan_policy=policy)
    _run(opt, ps, 2, gen)
    before, state = ps[0].detach().clone(), copy.deepcopy(opt.state_dict())

    def fail(*args, **kwargs):
        raise torch.linalg.LinAlgError("linalg.eigh: the algorithm failed to converge (simulated)")

    monkeypatch.setattr(torch.linalg, "eigh", fail)
    ps[0].grad = torch.randn(12, 5, generator=gen)
    if policy == "raise":
        with pytest.raises(NonFiniteUpdateError, match="factorisation that did not converge"):
            opt.step()
    else:
        opt.step()
        assert opt.skipped_steps == 1
    assert torch.equal(ps[0].detach(), before)
    after = opt.state_dict()
    assert torch.equal(after["state"][0]["momentum_buffer"], state["state"][0]["momentum_buffer"])
    if solver == "newton":
        assert torch.equal(after["state"][0]["solver"]["Y"], state["state"][0]["solver"]["Y"])


@pytest.mark.cuda
def test_cuda_fast_path():
    gen = torch.Generator(device="cuda").manual_seed(0)
    ps = [torch.nn.Parameter(M.project(torch.randn(256, 64, device="cuda", generator=gen)))]
    opt = ManifoldMuon(ps, lr=0.02, manifold=Stiefel())  # msign in bf16 (unused by Newton), point in float32
    for _ in range(20):
        ps[0].grad = torch.randn(256, 64, device="cuda", generator=gen)
        opt.step()
    assert ps[0].dtype == torch.float32
    assert float(M.defect(ps[0].detach())) <= 1e-5


def test_a_per_call_transpose_wide_false_refuses_a_wide_point():
    """steepest_direction(..., transpose_wide=False) applies the call's rule, as Stiefel(transpose_wide=False) does
    (it solved the wide problem)."""
    S = Stiefel()
    W = S.random(3, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match="tall or square"):
        S.steepest_direction(W, torch.randn(3, 6, dtype=torch.float64), transpose_wide=False)


def test_a_per_call_transpose_wide_true_accepts_a_wide_point_on_a_strict_manifold():
    """The override works both ways: on Stiefel(transpose_wide=False) a call with transpose_wide=True solves the
    wide point as its transpose, the same Φ as the default manifold gives (the same kernels on the same
    operands: equal to the last bit), and the manifold itself still refuses it without the override."""
    strict, W = Stiefel(transpose_wide=False), Stiefel().random(3, 6, dtype=torch.float64)
    G = torch.randn(3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    Phi = strict.steepest_direction(W, G, transpose_wide=True)
    assert torch.equal(Phi, Stiefel().steepest_direction(W, G))
    with pytest.raises(ValueError, match="tall or square"):
        strict.steepest_direction(W, G)

def test_a_float64_parameter_with_a_float32_solver_is_refused_at_construction():
    """Stiefel(work_dtype=torch.float32) cannot solve float64 points; the optimizer says so naming the parameter
    before any step (the step raised a TypeError that named none)."""
    W = torch.nn.Parameter(Stiefel().random(8, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"params'\]\[0\].*float64.*work_dtype"):
        ManifoldMuon([W], lr=0.1, manifold=Stiefel(work_dtype=torch.float32))
    ManifoldMuon([torch.nn.Parameter(W.detach().float())], lr=0.1, manifold=Stiefel(work_dtype=torch.float32))


def test_tangent_residual_names_batches_that_do_not_broadcast():
    with pytest.raises(ValueError, match="W .* and Phi .* are not broadcastable"):
        tangent_residual(torch.randn(3, 6, 2, dtype=torch.float64), torch.randn(2, 6, 2, dtype=torch.float64))
