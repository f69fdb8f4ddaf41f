"""The closed-form Stiefel direction (solver="completion"), the primal in the rotation (prop-stiefel-primal), the
manifold's public contracts, tangent momentum (thm-tangent-momentum) and the optimizer protocol.

Independent routes: the SDP answer key (cvxpy, which parametrises the tangent space directly and knows nothing of
the dual or of the completion), a second SDP with the rotation held fixed, msign by SVD for the exact limits,
finite differences for the backward of the projection, and trajectories compared step by step.
"""

from __future__ import annotations

import ast
import math
import pathlib

import numpy as np
import pytest
import torch

from svmuon import ManifoldMuon, Orthogonal, OrthogonalMuon, Stiefel, msign, stiefel_direction, stiefel_direction_sdp
from svmuon.orthogonal.base import Direction, Manifold
from svmuon.orthogonal.stiefel import tangent_residual
from svmuon.orthogonal.stiefel.reduction import _complete, _reduce_consistent

M = Stiefel()
F64 = torch.float64


def _instance(gen, m, n, rank=None, zero_columns=0, dtype=F64):
    W = M.random(m, n, generator=gen, dtype=F64)
    r = n if rank is None else rank
    G = torch.randn(m, r, generator=gen, dtype=F64) @ torch.randn(r, n, generator=gen, dtype=F64)
    G[:, :zero_columns] = 0  # an input that is constant over the batch: a zero column of the gradient
    return W.to(dtype), G.to(dtype)


CASES = {"8x3": (8, 3, None, 0), "12x5": (12, 5, None, 0), "9x5_rank2": (9, 5, 2, 0), "10x4_zero_cols": (10, 4, None, 2),
         "7x6_near_square": (7, 6, None, 0), "16x4": (16, 4, None, 0)}


# -- feasibility, exactness in the two limits, the certificate --------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
def test_completion_is_feasible_and_below_the_sdp_optimum(name, gen):
    W, G = _instance(gen, *CASES[name])
    sol = stiefel_direction(W, G)  # the default solver
    Phi = sol.Phi
    # feasible by construction (prop-stiefel-primal): tangent and in the unit spectral ball, up to the rounding of
    # the assembly WΩ + G⊥N in float64: |WᵀΦ + ΦᵀW| <= 2 γ ‖W‖ (‖Ω‖ + ‖G⊥‖‖N‖) with γ = 4 m u (a dot product of
    # length m, twice), in spectral norms, √n for the Frobenius norm of the residual
    red = _reduce_consistent(W, G)
    Omega = (W.T @ Phi - Phi.T @ W) / 2
    N = _complete(red.K, red.C, Omega).N
    u = torch.finfo(F64).eps
    bound = 2 * 4 * W.shape[0] * u * math.sqrt(W.shape[1]) * (1 + float(torch.linalg.matrix_norm(red.Gp, 2)
                                                                      * torch.linalg.matrix_norm(N, 2)))
    assert float(tangent_residual(W, Phi)) <= bound
    assert float(torch.linalg.matrix_norm(Phi, 2)) <= 1 + 1e-12  # divided by ‖Φ‖₂ where rounding exceeds 1
    _, optimum = stiefel_direction_sdp(W.numpy(), G.numpy())
    value = float((G * Phi).sum())
    # a feasible point is below the optimum (the SDP's own accuracy: ~1e-9 relative); and the certificate
    # (dual value at Y = 0 minus this value) bounds the true gap from above
    assert value <= optimum * (1 + 1e-7) + 1e-12
    true_gap = (optimum - value) / optimum
    assert float(sol.gap) >= true_gap - 1e-7
    assert true_gap <= 0.1  # measured ≤ 0.03 on these instances; a loose bound on the construction's quality


def test_completion_on_rank_one_gradients_is_far_from_the_optimum_within_its_certificate(gen):
    """The chapter's weak case (sec. "The closed-form direction"): rank-one gradients on St(10, 2), both a rotational
    and a normal part. Against the SDP (its accuracy ~1e-9 relative, hence the 1e-7 slack) the completion stays
    below the optimum and its certificate bounds the gap, and the gap is large on some draws: the chapter's claim
    that this case costs a step several per cent shorter (measured up to 13 % on twenty draws)."""
    gaps = []
    for _ in range(8):
        W, G = _instance(gen, 10, 2, rank=1)
        sol = stiefel_direction(W, G)
        _, optimum = stiefel_direction_sdp(W.numpy(), G.numpy())
        value = float((G * sol.Phi).sum())
        assert value <= optimum * (1 + 1e-7)
        gaps.append((optimum - value) / optimum)
        assert float(sol.gap) >= (optimum - value) / value - 1e-7
    assert max(gaps) > 0.03, gaps


def test_completion_is_exact_on_the_orthogonal_group_and_without_rotation(gen):
    # m = n: C = 0 and Φ = W msign([WᵀG]_skew) (eq-orth-direction); K = 0: Φ = msign(G⊥) (msign by SVD)
    W, G = _instance(gen, 6, 6)
    A = W.T @ G
    expected = W @ msign((A - A.T) / 2, method="svd")
    torch.testing.assert_close(stiefel_direction(W, G).Phi, expected, rtol=0, atol=1e-12)
    W, G = _instance(gen, 11, 4)
    Gp = G - W @ (W.T @ G)  # no component in span(W): K = 0
    torch.testing.assert_close(stiefel_direction(W, Gp).Phi, msign(Gp, method="svd"), rtol=0, atol=1e-10)


def test_the_primal_completion_is_the_best_normal_part(gen):
    # prop-stiefel-primal: for a fixed skew Ω with ‖Ω‖₂ < 1, max ⟨G, WΩ + E⟩ over WᵀE = 0, ‖[Ω; W⊥ᵀE]‖₂ <= 1 is
    # ⟨K, Ω⟩ + tr((R D Rᵀ)^{1/2}), attained by E = G⊥N; the answer key: the same SDP with Ω fixed (cvxpy)
    import cvxpy as cp

    W, G = _instance(gen, 9, 4)
    S = torch.randn(4, 4, generator=gen, dtype=F64)
    Omega = 0.8 * (S - S.T) / float(torch.linalg.matrix_norm(S - S.T, 2))
    red = _reduce_consistent(W, G)
    comp = _complete(red.K, red.C, Omega)
    Q, _ = np.linalg.qr(W.numpy(), mode="complete")
    B = Q[:, 4:].T @ G.numpy()
    E = cp.Variable((5, 4))
    prob = cp.Problem(cp.Maximize(cp.trace(B.T @ E)), [cp.sigma_max(cp.vstack([Omega.numpy(), E])) <= 1])
    prob.solve(solver="CLARABEL")
    expected = float(torch.sum(red.K * Omega)) + prob.value
    assert float(comp.value) == pytest.approx(expected, rel=1e-7)  # CLARABEL's accuracy here is ~1e-9
    Phi = W @ Omega + red.Gp @ comp.N
    assert float(tangent_residual(W, Phi)) <= 1e-12 and float(torch.linalg.matrix_norm(Phi, 2)) <= 1 + 1e-12
    assert float((G * Phi).sum()) == pytest.approx(float(comp.value), rel=1e-12)


def test_float32_completion_is_tangent_to_the_float32_floor(gen):
    # the reduction in float64 makes G⊥ orthogonal to range(W) even for a float32 W (WᵀW - I ~ 1e-7): the tangent
    # residual is that of the float32 point itself, a few eps √n (measured 6e-7 at 10 × 9; with G - WA in float32,
    # N's amplification made it 1.04)
    for m, n in ((10, 9), (64, 16), (256, 64)):
        W, G = _instance(gen, m, n, dtype=torch.float32)
        Phi = stiefel_direction(W, G).Phi
        assert float(tangent_residual(W.double(), Phi.double())) <= 16 * math.sqrt(n) * torch.finfo(torch.float32).eps
        assert float(torch.linalg.matrix_norm(Phi.double(), 2)) <= 1 + 1e-6


@pytest.mark.parametrize("name", [*CASES, "256x64", "256x64_rank20"])
def test_the_float32_work_dtype_is_feasible_and_loses_at_most_its_shift(name, gen):
    # work_dtype=float32 (every stage in float32): the optimizer's kernel and the public function on float32 inputs.
    # Tangent to the float32 floor (16 √n eps, as the float64 route's float32 output: the normal part is projected
    # once more). ‖Φ‖₂: the Gram shift δ = m u tr(Ĉ) covers the float32 Gram's rounding (γ_m ‖G⊥‖_F²); what it
    # does not cover is the backward error of the float32 Cholesky and eigendecompositions, γ_n ≈ n u relative,
    # bounded here by 4 n_max u = 256 u (n <= 64; measured ≤ 2.5e-6 here, ≤ 3.9e-6 on recorded gradients); the
    # public function divides by ‖Φ‖₂ (to 4 eps). Value: for the rotation Ω̂ the float32 route chose, the shift
    # costs at most 2 n √δ against the exact best completion p(Ω̂) (the chapter's exercise ex-stiefel-shift),
    # computed in float64 on the float64 projection of the point
    from svmuon.orthogonal.stiefel.completion import completion_direction

    shape = CASES.get(name) or {"256x64": (256, 64, None, 0), "256x64_rank20": (256, 64, 20, 0)}[name]
    W, G = _instance(gen, *shape, dtype=torch.float32)
    m, n = W.shape
    eps, u = torch.finfo(torch.float32).eps, torch.finfo(torch.float32).eps / 2
    kernel = completion_direction(W[None], G[None], work_dtype=torch.float32).Phi[0].double()
    public = stiefel_direction(W, G, work_dtype=torch.float32).Phi.double()
    assert kernel.dtype == public.dtype == F64 and public.shape == W.shape
    for Phi, excess in ((kernel, 256 * u), (public, 4 * eps)):
        assert float(tangent_residual(W.double(), Phi)) <= 16 * math.sqrt(n) * eps
        assert float(torch.linalg.matrix_norm(Phi, 2)) <= 1 + excess
    W64, G64 = M.project(W.double()), G.double()
    red = _reduce_consistent(W64, G64)
    Omega = (W64.T @ kernel - kernel.T @ W64) / 2
    Omega = Omega / max(1.0, float(torch.linalg.matrix_norm(Omega, 2)))  # a feasible rotation for p(Ω̂)
    best = float(_complete(red.K, red.C, Omega).value)  # p(Ω̂), eq-stiefel-primal
    delta = m * u * float(red.C.trace())
    assert float((G64 * kernel).sum()) >= best - 2 * n * math.sqrt(delta)


def test_the_float32_work_dtype_refuses_float64_inputs(gen):
    # a float64 gradient whose tangent part is small would have it replaced by float32 rounding noise, of full
    # length after msign, and the optimizer's eps rule is set for float64: refused, and a refused step changes nothing
    W, G = _instance(gen, 12, 5)
    with pytest.raises(TypeError, match="work_dtype=torch.float32 needs float32 points and gradients, got float64"):
        stiefel_direction(W, G, work_dtype=torch.float32)
    # the optimizer refuses such a parameter before any step (tests/test_stiefel.py names it); one added to
    # param_groups by hand still reaches the solver's refusal, and a refused step changes nothing
    p = torch.nn.Parameter(W.clone())
    with pytest.raises(TypeError, match="work_dtype=torch.float32"):
        ManifoldMuon([p], lr=0.1, manifold=Stiefel(work_dtype=torch.float32))
    q = torch.nn.Parameter(W.float())
    opt = ManifoldMuon([q], lr=0.1, manifold=Stiefel(work_dtype=torch.float32))
    opt.param_groups[0]["params"] = [p]
    p.grad = G.clone()
    with pytest.raises(TypeError, match="work_dtype=torch.float32"):
        opt.step()
    assert torch.equal(p.detach(), W) and not opt.state[p]


def test_a_normal_float64_gradient_gives_a_tangent_direction(gen):
    # G = W(S + Sᵀ): the tangent part is rounding noise; the public function still returns a tangent Φ in the unit
    # ball (its direction is arbitrary; steepest_direction's eps rule scales it to ~0): projected, then divided by
    # its spectral norm (before, the noise's component along W, amplified by N, left a residual of 2.0)
    W = M.random(32, 8, generator=gen, dtype=F64)
    S = torch.randn(8, 8, generator=gen, dtype=F64)
    sol = stiefel_direction(W, W @ (S + S.T))
    assert float(tangent_residual(W, sol.Phi)) <= 16 * math.sqrt(8) * torch.finfo(F64).eps
    assert float(torch.linalg.matrix_norm(sol.Phi, 2)) <= 1 + 1e-12
    assert float(sol.residual) == pytest.approx(float(tangent_residual(W, sol.Phi)))


def test_the_float32_work_dtype_is_an_option_of_the_completion_only(gen):
    assert Stiefel(work_dtype=torch.float32).work_dtype == torch.float32 and Stiefel().work_dtype == F64
    with pytest.raises(TypeError, match="work_dtype must be torch.float32 or torch.float64"):
        Stiefel(work_dtype=torch.float16)
    with pytest.raises(TypeError, match="work_dtype must be"):
        Stiefel(work_dtype="float32")
    for bad in (dict(solver="newton"), dict(route="newton_schulz")):
        with pytest.raises(ValueError, match="work_dtype=torch.float32 applies to solver='completion'"):
            Stiefel(work_dtype=torch.float32, **bad)
    with pytest.raises(TypeError, match="unexpected options"):  # the msign's dtype belongs to the optimizer
        Stiefel(compute_dtype=torch.float32)


def test_the_float32_work_dtype_in_the_optimizer(monkeypatch, gen):
    # one host read per step, the point stays on the manifold, and the steps follow the float64 route's: with
    # directions within 1e-3 of each other in spectral norm (measured ~5e-5 at 64 × 16: the float32 completion's
    # value loss here is ~1e-4 relative), four steps of length 0.05 stay within 4 · 0.05 · 1e-3
    from test_muon import count_host_syncs

    W0 = M.random(64, 16, generator=gen)
    ps = [torch.nn.Parameter(W0.clone()), torch.nn.Parameter(W0.clone())]
    opts = [ManifoldMuon([ps[0]], lr=0.05, manifold=Stiefel(work_dtype=torch.float32)),
            ManifoldMuon([ps[1]], lr=0.05, manifold=Stiefel())]

    def step(g):
        for p, opt in zip(ps, opts):
            p.grad = g.clone()
            opt.step()

    step(torch.randn(64, 16, generator=gen))
    calls = count_host_syncs(monkeypatch)
    for _ in range(3):
        step(torch.randn(64, 16, generator=gen))
    assert calls == ["__bool__"] * 6  # one per step of each optimizer
    assert float(M.defect(ps[0].detach())) <= 1e-5
    assert float(torch.linalg.matrix_norm(ps[0].detach() - ps[1].detach(), 2)) <= 4 * 0.05 * 1e-3


# -- the public methods' contracts (issue: they hold for any input they accept) --------------------------------
@pytest.mark.parametrize("solver", ["completion", "newton"])
def test_a_normal_gradient_gives_no_direction(solver, gen):
    # G = W(S + Sᵀ) has no tangent part: Φ must be tangent, in the unit ball, and ≈ 0 as for G = 0 (before: ‖Φ‖₂ =
    # 1.17 with a tangent residual of 2.4, a random direction from rounding noise). Rounding leaves a tangent part
    # of ~1e-15 ‖G‖; the eps rule scales Φ by it / (√eps ‖G‖) ~ 1e-7
    W = M.random(9, 4, generator=gen, dtype=F64)
    S = torch.randn(4, 4, generator=gen, dtype=F64)
    St = Stiefel(solver=solver)
    for G in (W @ (S + S.T), torch.zeros(9, 4, dtype=F64)):
        Phi = St.steepest_direction(W, G)
        assert float(Phi.abs().max()) <= 1e-6
        assert float(tangent_residual(W, Phi)) <= 1e-14  # projected onto the tangent space: rounding of a 9 × 4 product


def test_project_has_a_finite_backward_at_repeated_singular_values(gen):
    # the identity-like 2·I (all singular values equal) and a generic point: finite, and right by finite differences
    X = (2 * torch.eye(6, 4, dtype=F64)).requires_grad_()
    M.project(X).square().mul(torch.arange(24, dtype=F64).reshape(6, 4)).sum().backward()
    assert bool(torch.isfinite(X.grad).all())
    A = torch.randn(7, 3, generator=gen, dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(lambda T: M.project(T), (A,), eps=1e-6, atol=1e-7)
    wide = torch.randn(3, 7, generator=gen, dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(lambda T: M.project(T), (wide,), eps=1e-6, atol=1e-7)


def test_manifolds_own_no_msign_route():
    for cls in (Stiefel, Orthogonal):
        with pytest.raises(TypeError, match="ManifoldMuon"):
            cls(msign_method="newton_schulz")
    with pytest.warns(DeprecationWarning, match="solver="):
        assert Stiefel(method="newton").solver == "newton"
    with pytest.raises(ValueError, match="solver must be one of"):
        Stiefel(solver="amortised")


def test_atol_below_the_rounding_of_a_step_is_refused():
    p = torch.nn.Parameter(M.random(12, 5))
    with pytest.raises(ValueError, match="atol = 0.0 is below"):
        ManifoldMuon([p], lr=0.1, atol=0.0, manifold=M)
    ManifoldMuon([p], lr=0.1, atol=1e-4, manifold=M)  # above 16 √m eps (6.6e-6 in float32 at m = 12): accepted


@pytest.mark.parametrize("lr", [0.7, 5.0, 1e3, 1e20])
def test_float32_steps_of_any_length_stay_on_the_manifold(lr, gen):
    # before: float32 with lr >= 1e3 refused every step, blaming "a change outside the optimizer"; the retraction
    # now takes its eigendecomposition route beyond η² = 0.5, exact for any step length; at lr = 1e20 the Gram
    # matrix of W - ηΦ overflowed float32 and eigh raised torch's LinAlgError (now formed from (W - ηΦ)/η)
    p = torch.nn.Parameter(M.random(12, 5, generator=gen))
    opt = ManifoldMuon([p], lr=lr, manifold=M)
    for _ in range(5):
        p.grad = torch.randn(12, 5, generator=gen)
        opt.step()
    assert float(M.defect(p.detach())) <= 1e-5  # the book's float32 target


def test_an_off_manifold_error_says_which_happened(gen):
    from svmuon.optim import OffManifoldError

    p = torch.nn.Parameter(M.random(12, 5, generator=gen, dtype=F64))
    opt = ManifoldMuon([p], lr=0.1, manifold=M)
    p.grad = torch.randn(12, 5, generator=gen, dtype=F64)
    opt.step()
    with torch.no_grad():
        p.mul_(1.5)
    p.grad = torch.randn(12, 5, generator=gen, dtype=F64)
    with pytest.raises(OffManifoldError, match=r"1\.25 before the step.*changed outside the optimizer"):
        opt.step()


# -- tangent momentum (thm-tangent-momentum) ---------------------------------------------------------------------
@pytest.mark.parametrize("manifold,shape", [
    (Orthogonal(), (8, 8)),
    pytest.param(Stiefel(), (12, 5), marks=pytest.mark.slow),  # ~5 s on the shared machine
    pytest.param(Stiefel(solver="newton", tol=1e-12), (12, 5), marks=pytest.mark.slow)],  # ~30 s
    ids=["orthogonal", "stiefel", "stiefel_newton"])
def test_a_term_constant_on_the_manifold_changes_nothing(manifold, shape):
    # minimise ‖W - W*‖² + c‖W‖² (c‖W‖² = c n on the manifold): the whole trajectory must not depend on c. The
    # normal part 2cW only enters through rounding of the projection (~1e-16 × 2c‖W‖ per step), which the
    # direction amplifies at most by the conditioning of the step map; 60 steps: 1e-8 (measured ≤ 1e-10)
    gen = torch.Generator().manual_seed(1)
    target = manifold.random(*shape, generator=gen, dtype=F64)
    W0 = manifold.random(*shape, generator=gen, dtype=F64)
    paths = {}
    for c in (0.0, 1.0, 10.0):
        W = torch.nn.Parameter(W0.clone())
        opt = ManifoldMuon([W], lr=0.05, momentum=0.95, manifold=manifold, msign_method="svd")
        paths[c] = []
        for _ in range(60):
            opt.zero_grad()
            (((W - target) ** 2).sum() + c * (W**2).sum()).backward()
            opt.step()
            paths[c].append(W.detach().clone())
    for c in (1.0, 10.0):
        worst = max(float((a - b).abs().max()) for a, b in zip(paths[0.0], paths[c]))
        assert worst <= 1e-8, (c, worst)


# -- the optimizer protocol: one host synchronisation, and a new manifold needs no optimizer change -------------
def test_stiefel_step_reads_the_host_once(monkeypatch, gen):
    from test_muon import count_host_syncs

    ps = [torch.nn.Parameter(M.random(12, 5, generator=gen)), torch.nn.Parameter(M.random(5, 12, generator=gen))]
    opt = ManifoldMuon(ps, lr=0.05, manifold=M)
    for p in ps:
        p.grad = torch.randn(p.shape, generator=gen)
    opt.step()
    calls = count_host_syncs(monkeypatch)
    for _ in range(3):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    assert calls == ["__bool__"] * 3  # the single fused check per step (tall and wide share one batch)


class Sphere(Manifold):
    """Unit vectors (m × 1 points: WᵀW = 1), written against the public protocol only: the steepest direction of a
    vector under the spectral (= Euclidean) norm is the normalised tangent gradient, the retraction normalises."""

    def _shape_error(self, shape):
        return None if shape[-1] == 1 else f"a point of the sphere is a column (..., m, 1), got {shape}"

    def project(self, W):
        return W / torch.linalg.vector_norm(W, dim=-2, keepdim=True)

    def tangent(self, W, Z):
        return Z - W * (W * Z).sum(dim=-2, keepdim=True)

    def direction(self, W, U, orthogonalize, state):
        T = self.tangent(W, U)
        norm = torch.linalg.matrix_norm(T)
        return Direction(T / norm.clamp_min(torch.finfo(T.dtype).tiny)[:, None, None], norm, {}, {})

    def retract_direction(self, W, step, eta, eta_max=None):
        return self.project(W - eta * step)


def test_a_new_manifold_needs_no_optimizer_change(gen):
    # the sphere St(m, 1) through the protocol, against the library's Stiefel manifold on the same problem
    target = torch.nn.functional.normalize(torch.randn(7, 1, generator=gen, dtype=F64), dim=0)
    start = torch.nn.functional.normalize(torch.randn(7, 1, generator=gen, dtype=F64), dim=0)
    ends = []
    for manifold in (Sphere(), Stiefel()):
        W = torch.nn.Parameter(start.clone())
        opt = ManifoldMuon([W], lr=0.1, momentum=0.9, manifold=manifold, msign_method="svd")
        for _ in range(30):
            opt.zero_grad()
            ((W - target) ** 2).sum().backward()
            opt.step()
        ends.append(W.detach())
    torch.testing.assert_close(ends[0], ends[1], rtol=0, atol=1e-12)  # the same step to rounding
    assert float((ends[0] - target).norm()) < float((start - target).norm())


def test_orthogonal_muon_uses_the_same_protocol(gen):
    p = torch.nn.Parameter(Orthogonal().random(5, 5, generator=gen, dtype=F64))
    q = torch.nn.Parameter(p.detach().clone())
    a, b = OrthogonalMuon([p], lr=0.1), ManifoldMuon([q], lr=0.1, manifold=Orthogonal())
    for _ in range(3):
        p.grad = torch.randn(5, 5, generator=gen, dtype=F64)
        q.grad = p.grad.clone()
        a.step()
        b.step()
    assert torch.equal(p, q)


# -- one Stiefel package a newcomer can change --------------------------------------------------------------------
def test_the_stiefel_package_is_small_pieces():
    # issue 18's target: one concept per module, files <= 300 lines, functions <= 40 lines (docstrings aside), and
    # imports that point one way (no module imports the manifold or the entry points but the package's __init__)
    root = pathlib.Path(__file__).resolve().parents[1] / "lib" / "svmuon" / "orthogonal" / "stiefel"
    for path in sorted(root.glob("*.py")):
        text = path.read_text()
        assert len(text.splitlines()) <= 300, path.name
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                doc = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
                first = body[1].lineno if doc and len(body) > 1 else body[0].lineno
                assert node.end_lineno - first + 1 <= 40, (path.name, node.name)
        if path.name not in ("__init__.py", "manifold.py"):
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module:
                    assert not node.module.endswith(("stiefel.manifold", "stiefel.api")), (path.name, node.module)


# -- the matrix-product route (no eigendecomposition: what an accelerator runs) -----------------------------------
def test_the_square_root_from_below_never_overshoots(gen):
    # u_{k+1} = u_k (3 - u_k)²/4 on each eigenvalue: S² = D U_k with 0 ⪯ U_k ⪯ I, so S² ⪯ D at every k
    from svmuon.orthogonal.stiefel.completion import _sqrt_from_below

    V = torch.linalg.qr(torch.randn(6, 6, generator=gen, dtype=F64)).Q
    d = torch.tensor([1e-6, 1e-3, 0.05, 0.3, 0.9, 1.0], dtype=F64)
    D = V @ torch.diag(d) @ V.T
    for k in (0, 1, 3, 8, 30):
        S = _sqrt_from_below(D, k)
        gap = torch.linalg.eigvalsh(D - S @ S)
        # rounding: k steps of three n × n products of norm <= 1, each off by n u: 3 k n u (+ one for S²)
        assert float(gap.min()) >= -3 * (k + 1) * 6 * torch.finfo(F64).eps
    torch.testing.assert_close(S @ S, D, rtol=0, atol=1e-12)  # converged after 30 steps, even at 1e-6


@pytest.mark.parametrize("schedule,steps,worst", [("polar_express", None, 1e-4), ("keller_jordan", 5, 0.5)])
def test_the_matrix_product_route_is_feasible_and_close(schedule, steps, worst, gen):
    # feasible whatever the msign's accuracy (its output band's top h divides both parts); with a converging
    # schedule the value is within 1e-4 relative of the eigendecomposition route (measured ≤ 2e-5); Keller Jordan's
    # quintic (band [0.47, 1.2]) stays feasible but loses up to ~20 % (measured): the route needs a converging msign
    from svmuon.orthogonal.msign import Orthogonalizer

    orth = Orthogonalizer("newton_schulz", ns_coefficients=schedule, ns_steps=steps)
    St = Stiefel(route="newton_schulz")
    for m, n in ((12, 5), (30, 8), (64, 16)):
        W, G = _instance(gen, m, n)
        Phi = St.steepest_direction(W, G, orthogonalize=orth)
        assert float(tangent_residual(W, Phi)) <= 1e-12 and float(torch.linalg.matrix_norm(Phi, 2)) <= 1 + 1e-12
        reference = float((G * stiefel_direction(W, G, route="eigh").Phi).sum())
        assert float((G * Phi).sum()) >= reference * (1 - worst)


def test_the_matrix_product_route_in_the_optimizer(monkeypatch, gen):
    from test_muon import count_host_syncs

    p = torch.nn.Parameter(M.random(64, 16, generator=gen))
    opt = ManifoldMuon([p], lr=0.05, manifold=Stiefel(route="newton_schulz"))  # Polar Express, the default
    p.grad = torch.randn(64, 16, generator=gen)
    opt.step()
    calls = count_host_syncs(monkeypatch)
    for _ in range(3):
        p.grad = torch.randn(64, 16, generator=gen)
        opt.step()
    assert calls == ["__bool__"] * 3
    assert float(M.defect(p.detach())) <= 1e-5


def test_amortized_is_one_warm_dual_step(gen):
    """solver="amortized" is dual ascent with a budget of one step (su2025dual), warm-started in the optimizer
    from the multiplier of the previous training step: the same floats as dual_ascent with max_iter=1 (same
    operations, so exact equality), and the carried multiplier is what the second step starts from."""
    W = M.random(24, 6, generator=gen, dtype=torch.float64)
    G = torch.randn(24, 6, generator=gen, dtype=torch.float64)
    a = stiefel_direction(W, G, solver="amortized")
    b = stiefel_direction(W, G, solver="dual_ascent", max_iter=1)
    assert a.iterations == 1 and torch.equal(a.Phi, b.Phi) and torch.equal(a.X, b.X)
    ps = [torch.nn.Parameter(W.clone()) for _ in range(2)]
    opts = [ManifoldMuon([ps[0]], lr=0.05, manifold=Stiefel(solver="amortized")),
            ManifoldMuon([ps[1]], lr=0.05, manifold=Stiefel(solver="dual_ascent", max_iter=1))]
    for _ in range(3):
        g = torch.randn(24, 6, generator=gen, dtype=torch.float64)
        for p, opt in zip(ps, opts):
            p.grad = g.clone()
            opt.step()
    assert torch.equal(ps[0], ps[1])
    assert "Y" in opts[0].state[ps[0]]["solver"]  # the multiplier carried to the next step


def test_an_untangent_solver_direction_is_projected_before_the_retraction(gen):
    """One dual step (amortized) leaves Φ far from tangent (residual of order 1); the retraction's series
    assumes a tangent Φ, so the manifold projects it first. Without that, a float32 run drifted by ~1e-4 per
    few hundred steps and was refused (recorded in the stiefel-digits run). Bound: the defect of one polar
    retraction in float32, a few eps·√n, far below 1e-5, after every one of 300 steps."""
    p = torch.nn.Parameter(M.random(128, 64, generator=gen).float())
    opt = ManifoldMuon([p], lr=0.05, momentum=0.9, manifold=Stiefel(solver="amortized"))
    scale = torch.logspace(0, -3, 64)  # rank-deficient-like spectrum, as the digits gradients
    worst = 0.0
    for _ in range(300):
        p.grad = torch.randn(128, 64, generator=gen) * scale
        opt.step()
        worst = max(worst, float(M.defect(p.detach())))
    assert worst < 1e-5


def test_the_float32_work_dtype_reports_float64_multipliers_and_a_zero_gap_for_zero(gen):
    # the kernel keeps X, Y, the tangent norm and the certificate in float32 (the optimizer's step reads them there);
    # the public entry point returns them in float64 as its contract says. G = 0: Φ = 0, value = dual = 0, gap 0
    W, G = _instance(gen, 40, 8, dtype=torch.float32)
    sol = stiefel_direction(W, G, work_dtype=torch.float32)
    assert all(t.dtype == F64 for t in (sol.X, sol.Y, sol.tangent_norm, sol.gap))
    # float64 on the projected point: the same tangent norm up to the float32 route's rounding, (m + n) u relative per
    # product of the reduction (A = WᵀG, G⊥ = G - WA, tr C), amplified by κ = ‖G‖_F / ‖P_W(G)‖_F where the normal
    # part cancels (two such stages: 2 (m + n) u κ), plus the float32 point's own defect (its distance to the
    # projection, at most ‖WᵀW - I‖)
    W64 = M.project(W.double())
    ref = stiefel_direction(W64, G.double())
    m, n = W.shape
    u = torch.finfo(torch.float32).eps / 2
    kappa = float(torch.linalg.matrix_norm(G.double())) / float(ref.tangent_norm)
    defect = float(M.defect(W.double()))
    bound = (2 * (m + n) * u * kappa + defect) * float(ref.tangent_norm)
    assert abs(float(sol.tangent_norm) - float(ref.tangent_norm)) <= bound
    zero = stiefel_direction(W, torch.zeros_like(G), work_dtype=torch.float32)
    assert float(zero.gap) == 0.0 and float(zero.tangent_norm) == 0.0 and not bool(zero.Phi.any())


# -- contracts found by an adversarial review (2026-12-02) ------------------------------------------------------
@pytest.mark.parametrize("perturb", ["scaled", "noise", "doubled"])
@pytest.mark.parametrize("lr", [0.1, 0.8])
def test_a_point_changed_outside_is_refused_at_any_step_length(perturb, lr, gen):
    # before: the polar retraction returns a point from any W, so the check of the new point passed, and a W scaled
    # by 1.01 or perturbed by 3e-3 (defect 1e-2 against the tolerance 2√eps = 7e-4 in float32) was re-projected
    # silently; W * 2 was refused at lr = 0.1 (the series route) but not at lr = 0.8 (eigh). Now the point before
    # the step is checked too (Stiefel.start_defect), as its retracted point shows it on O(n)
    from svmuon.optim import OffManifoldError

    p = torch.nn.Parameter(M.random(6, 3, generator=gen))
    opt = ManifoldMuon([p], lr=lr, manifold=M)
    p.grad = torch.randn(6, 3, generator=gen)
    opt.step()
    with torch.no_grad():
        if perturb == "scaled":
            p.mul_(1.01)
        elif perturb == "noise":
            p.add_(3e-3 * torch.randn(6, 3, generator=gen))
        else:
            p.mul_(2.0)
    defect = float(M.defect(p.detach()))
    assert defect > 4 * math.sqrt(torch.finfo(torch.float32).eps)  # well above the tolerance 2√eps
    before, state = p.detach().clone(), {k: v.clone() for k, v in opt.state[p].items() if torch.is_tensor(v)}
    p.grad = torch.randn(6, 3, generator=gen)
    with pytest.raises(OffManifoldError, match=r"before the step.*changed outside the optimizer"):
        opt.step()
    assert torch.equal(p.detach(), before)
    assert all(torch.equal(opt.state[p][k], v) for k, v in state.items())
    with torch.no_grad():  # projected back as the message says, it steps again
        p.copy_(M.project(p))
    opt.step()


@pytest.mark.parametrize("shape", [(5, 2), (2, 5), (6, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_project_has_a_finite_backward_where_W_is_rank_deficient(shape, dtype, gen):
    # before: the rank-deficient fallback (U Vᵀ of torch's SVD) differentiated through torch.linalg.svd, whose
    # backward divides by σ_i² - σ_j²: NaN at W = 0 and at every matrix with a zero singular value
    m, n = shape
    k = min(m, n)
    cases = [torch.zeros(m, n, dtype=dtype)]
    for _ in range(5):  # a repeated column (or row): one zero singular value
        A = torch.randn(m, n, generator=gen, dtype=F64)
        if m >= n:
            A[:, 1] = A[:, 0]
        else:
            A[1] = A[0]
        cases.append(A.to(dtype))
    for X in cases:
        X = X.clone().requires_grad_(True)
        Q = M.project(X)
        assert float(M.defect(Q.detach())) <= 8 * k * torch.finfo(dtype).eps  # a point, to rounding
        (Q * torch.randn(m, n, generator=gen, dtype=F64).to(dtype)).sum().backward()
        assert torch.isfinite(X.grad).all()


def test_project_backward_holds_a_zero_direction_fixed(gen):
    # at W = [w, 0] (tall), the projection's first column w/|w| moves with w and the completing column has no
    # derivative; the backward is the derivative of the first column (finite differences along the first column,
    # where the map is smooth: central differences, error O(h²) with h = 1e-6, far below 1e-6)
    w = torch.randn(5, generator=gen, dtype=F64)
    X = torch.stack([w, torch.zeros(5, dtype=F64)], dim=1).requires_grad_(True)
    C = torch.zeros(5, 2, dtype=F64)
    C[:, 0] = torch.randn(5, generator=gen, dtype=F64)
    (M.project(X) * C).sum().backward()
    h, fd = 1e-6, torch.zeros(5, dtype=F64)
    for i in range(5):
        e = torch.zeros(5, 2, dtype=F64)
        e[i, 0] = h
        fd[i] = ((M.project(X.detach() + e) * C).sum() - (M.project(X.detach() - e) * C).sum()) / (2 * h)
    assert torch.allclose(X.grad[:, 0], fd, atol=1e-6)
    assert torch.isfinite(X.grad).all()


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_retract_along_returns_a_point_every_method_accepts(dtype, gen):
    # before: the closed form was kept while its result was off the manifold by up to 10√eps, above the √eps every
    # method requires of a point (a non-tangent Φ, float32: defect 1.9e-3; then steepest_direction refused it)
    eps = torch.finfo(dtype).eps
    for _ in range(5):
        W = M.random(7, 3, generator=gen, dtype=dtype)
        Phi = torch.randn(7, 3, generator=gen, dtype=F64).to(dtype)
        Phi = Phi / torch.linalg.matrix_norm(Phi, 2)
        W1 = M.retract_along(W, Phi, 0.5)
        assert float(M.defect(W1)) <= 0.25 * math.sqrt(eps)
        M.steepest_direction(W1, torch.randn(7, 3, generator=gen, dtype=F64).to(dtype))  # accepted as a point
    O = Orthogonal()  # a tangent Φ that is not a partial isometry: the closed form does not apply, the definition does
    W = O.project(torch.randn(5, 5, generator=gen, dtype=F64))
    S = torch.randn(5, 5, generator=gen, dtype=F64)
    Phi = W @ (S - S.T)
    Phi = Phi / torch.linalg.matrix_norm(Phi, 2)
    W1 = O.retract_along(W, Phi, 1.0)
    assert float(O.defect(W1)) <= 0.25 * math.sqrt(torch.finfo(F64).eps)
    assert torch.allclose(W1, O.retract(W, -Phi), atol=1e-12)


def test_tangent_residual_of_wide_matrices_is_that_of_their_transposes(gen):
    # before: a wide W (orthonormal rows) got the tall formula: 2.25 for a tangent Φ
    W = M.random(3, 6, generator=gen, dtype=F64)
    Phi = M.steepest_direction(W, torch.randn(3, 6, generator=gen, dtype=F64))
    assert float(tangent_residual(W, Phi)) <= 1e-12  # tangent to float64 rounding
    D = torch.randn(3, 6, generator=gen, dtype=F64)
    assert float(tangent_residual(W, D)) == pytest.approx(float(torch.linalg.matrix_norm(W @ D.T + D @ W.T)), rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_orthogonal_steepest_direction_damps_a_normal_gradient_as_stiefel_does(dtype, gen):
    # before: Orthogonal().steepest_direction(W, W S) with S symmetric (tangent part: rounding noise) returned a
    # unit direction (msign of noise), while Stiefel's on the same square W applied the eps rule; the two agree now
    # (to the rounding of two routes to the same noise: a few eps of ‖G‖ against an eps rule of √eps)
    W = Orthogonal().project(torch.randn(5, 5, generator=gen, dtype=F64)).to(dtype)
    S = torch.randn(5, 5, generator=gen, dtype=F64).to(dtype)
    G = W @ (S + S.T)
    phi_o, phi_s = Orthogonal().steepest_direction(W, G), M.steepest_direction(W, G)
    eps = torch.finfo(dtype).eps
    assert float(torch.linalg.matrix_norm(phi_o, 2)) <= 1e3 * eps / math.sqrt(eps)  # noise / √eps, not 1
    assert float(torch.linalg.matrix_norm(phi_s, 2)) <= 1e3 * eps / math.sqrt(eps)
    G = torch.randn(5, 5, generator=gen, dtype=F64).to(dtype)  # a generic gradient keeps its unit direction
    assert float(torch.linalg.matrix_norm(Orthogonal().steepest_direction(W, G), 2)) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("manifold", [Orthogonal(), M], ids=["orthogonal", "stiefel"])
@pytest.mark.parametrize("eps, error", [("a", TypeError), (True, TypeError), (-1.0, ValueError),
                                        (float("nan"), ValueError)])
def test_steepest_direction_refuses_a_bad_eps(manifold, eps, error, gen):
    W = manifold.random(5, 5, generator=gen, dtype=F64)
    with pytest.raises(error, match="eps must be"):
        manifold.steepest_direction(W, torch.randn(5, 5, generator=gen, dtype=F64), eps=eps)


@pytest.mark.parametrize("manifold, shape", [(Orthogonal(), (5, 5)), (M, (6, 3)), (M, (3, 6))],
                         ids=["orthogonal", "stiefel", "stiefel_wide"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_retract_of_a_half_precision_point_is_computed_in_float32(manifold, shape, dtype, gen):
    # before: torch's NotImplementedError ("linalg_svd_cpu" not implemented for 'Half'), though the dtype passes the
    # checks and project upcasts; the result is in W's dtype, a point to its rounding (float16 eps 1e-3, bf16 8e-3)
    W32 = manifold.project(torch.randn(*shape, generator=gen))
    W, Xi = W32.to(dtype), manifold.project_tangent(W32, 0.1 * torch.randn(*shape, generator=gen)).to(dtype)
    out = manifold.retract(W, Xi)
    assert out.dtype == dtype and out.shape == W.shape
    assert float(manifold.defect(out)) <= 4 * torch.finfo(dtype).eps


@pytest.mark.parametrize("opt_cls", ["muon", "manifold_muon"])
@pytest.mark.parametrize("bad, error", [(float("nan"), ValueError), (-0.1, ValueError), ("0.1", TypeError)])
def test_a_bad_lr_set_after_construction_is_refused_at_the_step(opt_cls, bad, error, gen):
    # before: a NaN lr written into param_groups was reported as a non-finite update blaming the gradients or the
    # momentum, and a negative one was used as is; now the step refuses it, naming lr, with nothing changed
    from svmuon import Muon

    p = torch.nn.Parameter(M.random(6, 3, generator=gen))
    opt = Muon([p], lr=0.1) if opt_cls == "muon" else ManifoldMuon([p], lr=0.1, manifold=M)
    p.grad = torch.randn(6, 3, generator=gen)
    opt.step()
    before = p.detach().clone()
    state = {k: v.clone() for k, v in opt.state[p].items() if torch.is_tensor(v)}
    opt.param_groups[0]["lr"] = bad
    with pytest.raises(error, match=r"lr'\] \(set after construction\)"):
        opt.step()
    assert torch.equal(p.detach(), before) and all(torch.equal(opt.state[p][k], v) for k, v in state.items())
    opt.param_groups[0]["lr"] = 0.05  # a scheduler's plain float is fine
    opt.step()


@pytest.mark.parametrize("opt_cls", ["muon", "manifold_muon"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.1])
def test_a_bad_tensor_lr_is_refused_at_the_step_without_another_host_read(opt_cls, bad, gen):
    # before: a tensor lr changed in place after construction (by a scheduler or by hand) was not read; NaN was
    # reported as a non-finite update blaming the gradients, a negative one was used as is (an ascent step). Now its
    # check rides on the step's one host synchronisation, the error names it, and nothing is changed
    from svmuon import Muon
    from svmuon.bench._common import host_syncs

    p = torch.nn.Parameter(M.random(6, 3, generator=gen))
    lr = torch.tensor(0.1)
    opt = Muon([p], lr=lr) if opt_cls == "muon" else ManifoldMuon([p], lr=lr, manifold=M)
    p.grad = torch.randn(6, 3, generator=gen)
    with host_syncs() as calls:
        opt.step()
    assert len(calls) == 1  # the lr's flag joined the step's one read
    before = p.detach().clone()
    state = {k: v.clone() for k, v in opt.state[p].items() if torch.is_tensor(v)}
    lr.fill_(bad)
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['lr'\] must be a finite number >= 0"):
        opt.step()
    assert torch.equal(p.detach(), before) and all(torch.equal(opt.state[p][k], v) for k, v in state.items())
    lr.fill_(0.05)
    opt.step()
    assert not torch.equal(p.detach(), before)


def test_route_auto_keeps_an_explicit_float32_work_dtype_on_an_accelerator():
    # before: on an accelerator "auto" took the matrix-product route, where work_dtype=torch.float32 does nothing:
    # an option given by name was silently ignored there. The resolution is a pure function of options and device,
    # so it is tested here without one
    from svmuon.orthogonal.stiefel.dispatch import resolve_route
    from svmuon.orthogonal.stiefel.options import StiefelOptions

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_route(StiefelOptions(), cpu) == "eigh"
    assert resolve_route(StiefelOptions(), cuda) == "newton_schulz"
    assert resolve_route(StiefelOptions(work_dtype=torch.float32), cuda) == "eigh"
    assert resolve_route(StiefelOptions(route="newton_schulz"), cpu) == "newton_schulz"
    assert resolve_route(StiefelOptions(route="eigh"), cuda) == "eigh"


def test_a_bad_tensor_lr_raises_under_nan_policy_skip_too(gen):
    # skip is for non-finite updates (a bad batch); a NaN learning rate is a configuration error and would skip
    # every later step: it raises, naming lr, and the skipped-step counter does not move
    p = torch.nn.Parameter(M.random(6, 3, generator=gen))
    lr = torch.tensor(0.1)
    opt = ManifoldMuon([p], lr=lr, manifold=M, nan_policy="skip")
    p.grad = torch.randn(6, 3, generator=gen)
    lr.fill_(float("nan"))
    with pytest.raises(ValueError, match=r"\['lr'\] must be a finite number >= 0, got nan"):
        opt.step()
    assert opt.skipped_steps == 0 and not opt.state.get(p)


def test_a_per_call_solver_override_drops_an_inherited_float32_work_dtype(gen):
    # before: Stiefel(work_dtype=torch.float32).steepest_direction(W, G, solver="newton") raised ValueError (float32
    # work applies to the completion only), so every per-call override had to reset work_dtype by hand
    from svmuon.orthogonal.stiefel.options import StiefelOptions

    base = StiefelOptions(work_dtype=torch.float32)
    assert base.override(solver="newton").work_dtype == torch.float64
    assert base.override(route="newton_schulz").work_dtype == torch.float64
    assert base.override(route="eigh").work_dtype == torch.float32  # still applies: kept
    with pytest.raises(ValueError, match="work_dtype=torch.float32 applies to solver='completion'"):
        base.override(solver="newton", work_dtype=torch.float32)  # given by name: checked as at construction
    W = M.random(12, 5, generator=gen)
    G = torch.randn(12, 5, generator=gen)
    Phi = Stiefel(work_dtype=torch.float32).steepest_direction(W, G, solver="newton")
    ref = Stiefel().steepest_direction(W, G, solver="newton")
    # the override leaves exactly Stiefel()'s options with solver="newton": the same computation, bit for bit
    assert torch.equal(Phi, ref)
