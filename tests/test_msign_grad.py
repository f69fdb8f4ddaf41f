"""Gradients of msign(method="svd") and Orthogonal.project (svmuon.orthogonal._polar_grad), and rcond types.

Expected values come from central finite differences of an independent forward, ``scipy.linalg.polar``
(full-rank square, tall and wide), or of a NumPy truncated SVD (rank-deficient inputs), and from
``torch.autograd.gradcheck`` (which differentiates msign's own forward numerically, never its backward).

Finite-difference tolerance: for f(h) = <C, polar(X + hE)> the central difference has truncation error
h²/6 |f'''| and rounding error ~ eps |f| / h. With h = 1e-6, singular values >= 0.25 (so the derivatives of
the polar factor are O(1/σ^k) = O(10)) and float64 (eps = 2.2e-16) both are ~1e-10; the bound 1e-7 on the
relative error leaves a factor of about 1000 and still catches any wrong term (those are O(1)).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch
from helpers import with_spectrum

from svmuon import Orthogonal, Stiefel, msign

F64 = torch.float64
H = 1e-6
FD_RTOL = 1e-7  # see the module docstring


def _grad(fn, X, C):
    Xr = X.clone().requires_grad_()
    (fn(Xr) * C).sum().backward()
    return Xr.grad


def _fd_directional(forward, X, C, E, h=H):
    """Central difference of <C, forward(X + tE)> at t = 0, in NumPy float64."""
    X, C, E = (np.asarray(a, dtype=np.float64) for a in (X, C, E))
    return float(((forward(X + h * E) - forward(X - h * E)) * C).sum() / (2 * h))


def _polar(X):
    return scipy.linalg.polar(X)[0]  # side='right': X = U P, U has the shape of X (tall, square or wide)


def _polar_any(X):
    return _polar(X) if X.shape[0] >= X.shape[1] else _polar(X.T).T  # wide: polar(Xᵀ)ᵀ, same factor


def _cases(gen):
    Q4 = Orthogonal().random(4, 4, generator=gen, dtype=F64)
    return {
        "random square": with_spectrum([2.0, 1.3, 0.7, 0.3], 4, 4, gen),
        "orthogonal": Q4,  # all singular values equal: torch's SVD backward is NaN here
        "3 x orthogonal": 3 * Q4,
        "repeated pairs": with_spectrum([2.0, 2.0, 0.5, 0.5], 4, 4, gen),
        "tall": with_spectrum([1.5, 1.0, 0.4], 7, 3, gen),
        "tall isometry": with_spectrum([1.0, 1.0, 1.0], 6, 3, gen),
        "wide": with_spectrum([1.2, 0.8, 0.3], 3, 6, gen),
        "wide, repeated": with_spectrum([0.5, 0.5, 0.5], 3, 5, gen),
    }


@pytest.mark.parametrize("case", ["random square", "orthogonal", "3 x orthogonal", "repeated pairs", "tall",
                                  "tall isometry", "wide", "wide, repeated"])
def test_msign_gradient_matches_finite_differences(case, gen):
    X = _cases(gen)[case]
    C = torch.randn(X.shape, generator=gen, dtype=F64)
    g = _grad(msign, X, C)
    assert torch.isfinite(g).all()
    for _ in range(4):
        E = torch.randn(X.shape, generator=gen, dtype=F64)
        fd = _fd_directional(_polar_any, X, C, E)
        assert abs(float((g * E).sum()) - fd) <= FD_RTOL * max(1.0, abs(fd)), case


def test_torch_svd_backward_is_nan_at_orthogonal_matrices_and_ours_is_not(gen):
    """The reason for the custom backward: differentiating U Vᵀ through torch.linalg.svd divides by 0."""
    # A signed permutation: exactly orthogonal, so its computed singular values are exactly equal and torch's
    # backward divides by σ_i² - σ_j² = 0. (A QR-made Q is orthogonal only to rounding: its σ differ by an ulp
    # or not, depending on the draw and the CPU, and torch's gradient is then NaN or finite.)
    P = torch.tensor([[0, 1, 0, 0], [0, 0, 0, -1], [1, 0, 0, 0], [0, 0, -1, 0]], dtype=F64)
    Xr = P.clone().requires_grad_()
    U, _, Vh = torch.linalg.svd(Xr)
    (U @ Vh).pow(3).sum().backward()
    assert torch.isnan(Xr.grad).any()  # torch 2.x: all 16 entries
    Q = Orthogonal().random(4, 4, generator=gen, dtype=F64)
    assert torch.isfinite(_grad(msign, P, torch.ones_like(P))).all()
    assert torch.isfinite(_grad(msign, Q, torch.ones_like(Q))).all()


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 5)])
def test_gradcheck_random(shape, gen):
    X = torch.randn(shape, generator=gen, dtype=F64, requires_grad=True)
    # gradcheck's central differences (eps 1e-6) are accurate to ~1e-10 on O(1) Jacobians; atol 1e-7
    assert torch.autograd.gradcheck(msign, (X,), eps=1e-6, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("case", ["orthogonal", "repeated pairs", "tall isometry", "wide, repeated"])
def test_gradcheck_repeated_singular_values(case, gen):
    X = _cases(gen)[case].requires_grad_()
    assert torch.autograd.gradcheck(msign, (X,), eps=1e-6, atol=1e-7, rtol=1e-6)


def test_batched_gradient_equals_per_matrix_gradients(gen):
    Q = Stiefel().random(2, 3, 5, 4, generator=gen, dtype=F64)  # batch of tall isometries
    X = torch.cat([Q, torch.randn(2, 3, 5, 4, generator=gen, dtype=F64)], dim=1)
    C = torch.randn(X.shape, generator=gen, dtype=F64)
    g = _grad(msign, X, C)
    for i in range(X.shape[0]):
        for j in range(X.shape[1]):
            # same SVD kernels per matrix; batched LAPACK may differ by rounding only
            torch.testing.assert_close(g[i, j], _grad(msign, X[i, j], C[i, j]), rtol=0, atol=1e-12)
    # one isometry and one Gaussian matrix in a batch of two (gradcheck's cost grows with the entries)
    assert torch.autograd.gradcheck(msign, (X[0, 2:4].clone().requires_grad_(),), eps=1e-6, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_low_precision_gradient_at_orthogonal_matrix(dtype, gen):
    Q = Orthogonal().random(5, 5, generator=gen, dtype=F64)
    C = torch.randn(5, 5, generator=gen, dtype=F64)
    expected = _grad(msign, Q, C)
    g = _grad(msign, Q.to(dtype), C.to(dtype))
    assert g.dtype == dtype and torch.isfinite(g).all()
    # float32: eps 1.2e-7 times O(10) growth through SVD and products; float16: input rounding 4.9e-4 per entry
    tol = {torch.float32: 1e-5, torch.float16: 1e-2}[dtype]
    torch.testing.assert_close(g.double(), expected, rtol=0, atol=tol * float(expected.abs().max()))


# -- rank-deficient inputs: msign jumps; the backward is the derivative of the computed (truncated) map ---------

def _truncate(X, r):
    U, s, Vt = np.linalg.svd(X, full_matrices=False)
    return (U[:, :r] * s[:r]) @ Vt[:r]


def _msign_rank(X, r):
    U, _, Vt = np.linalg.svd(X, full_matrices=False)
    return U[:, :r] @ Vt[:r]


@pytest.mark.parametrize("m,n,r", [(6, 4, 2), (4, 6, 3), (5, 5, 3), (5, 5, 4)])
def test_rank_deficient_gradient_is_the_fixed_rank_derivative(m, n, r, gen):
    rng = np.random.default_rng(r + 10 * m + 100 * n)
    X = _truncate(with_spectrum([2.0, 1.5, 1.0, 0.6][:r] + [0.3] * (min(m, n) - r), m, n, gen).numpy(), r)
    C = rng.standard_normal((m, n))
    g = _grad(msign, torch.from_numpy(X), torch.from_numpy(C)).numpy()
    assert np.isfinite(g).all()
    U, _, Vt = np.linalg.svd(X)
    # no component in the rank-changing block U_⊥ᵀ (·) V_⊥, where msign jumps (rounding: 1e-14)
    assert np.abs(U[:, r:].T @ g @ Vt[r:].T).max() < 1e-14
    for _ in range(4):  # along the curve t -> rank-r truncation of X + tE, which stays on the rank-r manifold
        E = rng.standard_normal((m, n))
        fd = _fd_directional(lambda Y: _msign_rank(_truncate(Y, r), r), X, C, E)
        assert abs(float((g * E).sum()) - fd) <= FD_RTOL * max(1.0, abs(fd))


@pytest.mark.parametrize("m,n,r", [(6, 4, 2), (4, 6, 3), (5, 5, 3)])
def test_rank_deficient_gradient_is_the_derivative_of_the_computed_map(m, n, r, gen):
    """With rcond = 1e-3 and steps h = 1e-6, X + hE keeps r singular values above the cutoff and drops the
    rest (they are O(h)), so msign(·, rcond=1e-3) is the top-r truncated polar factor along every direction E,
    rank-changing ones included; its central differences (NumPy SVD) must match the backward."""
    rng = np.random.default_rng(7 * m + n)
    X = _truncate(with_spectrum([2.0, 1.5, 1.0, 0.6][:r] + [0.3] * (min(m, n) - r), m, n, gen).numpy(), r)
    C = rng.standard_normal((m, n))
    Xr = torch.from_numpy(X).requires_grad_()
    (msign(Xr, rcond=1e-3) * torch.from_numpy(C)).sum().backward()
    for _ in range(4):
        E = rng.standard_normal((m, n))
        fd = _fd_directional(lambda Y: _msign_rank(Y, r), X, C, E)
        assert abs(float((Xr.grad.numpy() * E).sum()) - fd) <= FD_RTOL * max(1.0, abs(fd))


def test_zero_matrix_has_zero_gradient():
    X = torch.zeros(3, 4, dtype=F64, requires_grad=True)
    msign(X).sum().backward()
    assert torch.equal(X.grad, torch.zeros(3, 4, dtype=F64))


# -- Orthogonal.project -------------------------------------------------------------------------------------

def test_project_gradcheck_and_finite_differences(gen):
    M = Orthogonal()
    W = torch.randn(2, 4, 4, generator=gen, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(M.project, (W,), eps=1e-6, atol=1e-7, rtol=1e-6)
    Q = M.random(4, 4, generator=gen, dtype=F64)
    C = torch.randn(4, 4, generator=gen, dtype=F64)
    g = _grad(M.project, Q, C)
    for _ in range(3):
        E = torch.randn(4, 4, generator=gen, dtype=F64)
        fd = _fd_directional(_polar, Q, C, E)
        assert abs(float((g * E).sum()) - fd) <= FD_RTOL * max(1.0, abs(fd))


def _fd_gradient(forward, X, C, h=1e-9):
    """Full gradient of <C, forward(X)> by central differences, entry by entry."""
    g = np.zeros_like(X)
    for idx in np.ndindex(*X.shape):
        E = np.zeros_like(X)
        E[idx] = 1.0
        g[idx] = _fd_directional(forward, X, C, E, h=h)
    return g


def test_project_singular_fallback_one_zero_singular_value():
    """One σ = 0: the fallback's gradient is the limit of the gradients at the invertible neighbours
    W + ε u vᵀ (ε ↓ 0, u, v the null vectors it used), whose polar factors tend to the returned U Vᵀ."""
    M = Orthogonal()
    rng = np.random.default_rng(1)
    W = np.diag([3.0, 2.0, 1.0, 0.0])  # exact zero singular value: project falls back to a full U Vᵀ
    C = rng.standard_normal((4, 4))
    Wt = torch.from_numpy(W).requires_grad_()
    Q = M.project(Wt)
    assert torch.equal(Q.detach(), torch.eye(4, dtype=F64))  # LAPACK's null vectors: u = v = e4
    (Q * torch.from_numpy(C)).sum().backward()
    # neighbour diag(3, 2, 1, ε): its gradient converges to the limit at rate O(ε) (ε = 1e-7); the
    # entrywise FD step 1e-9 keeps the neighbour's smallest singular value away from 0
    near = _fd_gradient(_polar, W + 1e-7 * np.diag([0, 0, 0, 1.0]), C)
    np.testing.assert_allclose(Wt.grad.numpy(), near, rtol=0, atol=1e-5)
    # the other side, diag(3, 2, 1, -ε), has the other polar factor diag(1, 1, 1, -1) and another limit:
    # Q and its derivative jump across the singular matrices
    other = _fd_gradient(_polar, W - 1e-7 * np.diag([0, 0, 0, 1.0]), C)
    assert np.abs(other - near).max() > 0.1


def test_project_singular_fallback_two_zero_singular_values():
    """Two σ = 0: no derivative (the rotation between null spaces is arbitrary); the backward holds it fixed."""
    M = Orthogonal()
    rng = np.random.default_rng(2)
    W = np.diag([3.0, 2.0, 0.0, 0.0])
    C = rng.standard_normal((4, 4))
    Wt = torch.from_numpy(W).requires_grad_()
    Q = M.project(Wt)
    assert torch.equal(Q.detach(), torch.eye(4, dtype=F64))  # LAPACK's completion of diag(3, 2, 0, 0)
    (Q * torch.from_numpy(C)).sum().backward()
    g = Wt.grad.numpy()
    assert np.isfinite(g).all() and np.abs(g[2:, 2:]).max() == 0.0
    # the other entries are the limit from invertible neighbours diag(3, 2, ε, 2ε), whose null-null block
    # blows up like 1/ε (the derivative that does not exist at W)
    neighbour = _fd_gradient(_polar, W + 1e-7 * np.diag([0, 0, 1.0, 2.0]), C)
    mask = np.ones((4, 4), bool)
    mask[2:, 2:] = False
    np.testing.assert_allclose(g[mask], neighbour[mask], rtol=0, atol=1e-5)
    assert np.abs(neighbour[2:, 2:]).max() > 1e5


# -- second derivatives: refused with a clear error -----------------------------------------------------------

def test_double_backward_raises_clearly(gen):
    X = torch.randn(4, 3, generator=gen, dtype=F64, requires_grad=True)
    (g,) = torch.autograd.grad(msign(X).pow(3).sum(), X, create_graph=True)  # creating the graph is fine
    with pytest.raises(RuntimeError, match="first derivatives only"):
        g.sum().backward()
    with pytest.raises(RuntimeError, match="first derivatives only"):
        torch.autograd.gradgradcheck(msign, (X,))
    W = torch.randn(3, 3, generator=gen, dtype=F64, requires_grad=True)
    (g,) = torch.autograd.grad(Orthogonal().project(W).pow(3).sum(), W, create_graph=True)
    with pytest.raises(RuntimeError, match="first derivatives only"):
        g.sum().backward()


def test_newton_schulz_route_keeps_plain_autograd(gen):
    """The custom backward is the SVD route's only: Newton–Schulz is differentiated through its products."""
    X = torch.randn(3, 2, generator=gen, dtype=F64, requires_grad=True)
    f = lambda x: msign(x, method="newton_schulz")  # noqa: E731  (default schedule: spelled alike on every branch)
    assert torch.autograd.gradgradcheck(f, (X,), eps=1e-6, atol=1e-6, rtol=1e-5)


# -- rcond given as a NumPy scalar ---------------------------------------------------------------------------

@pytest.mark.parametrize("rcond", [np.float64(1e-3), np.float32(1e-3), np.float16(1e-3), 1e-3])
def test_rcond_numpy_scalars(rcond, gen):
    # singular values 1, 0.5, 2e-3, 5e-4: the cutoff 1e-3 (any of these spellings) keeps the first three
    U = Stiefel().random(6, 4, generator=gen, dtype=F64)
    V = Orthogonal().random(4, 4, generator=gen, dtype=F64)
    G = (U * torch.tensor([1.0, 0.5, 2e-3, 5e-4], dtype=F64)) @ V.T
    expected = U[:, :3] @ V[:, :3].T  # from the construction, not from msign
    torch.testing.assert_close(msign(G, rcond=rcond), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(msign(G.float(), rcond=rcond), expected.float(), rtol=0, atol=1e-4)


@pytest.mark.parametrize("rcond,err", [(np.int64(0), None), (np.float32("nan"), ValueError),
                                       (np.float64(-1e-3), ValueError), (np.float32("inf"), ValueError),
                                       (10**400, ValueError), (np.bool_(True), TypeError), ("1e-3", TypeError)])
def test_rcond_numpy_scalars_errors(rcond, err, gen):
    G = torch.randn(4, 3, generator=gen, dtype=F64)
    if err is None:
        # np.int64(0) is read as 0.0: the same arithmetic, bitwise
        torch.testing.assert_close(msign(G, rcond=rcond), msign(G, rcond=0.0), rtol=0, atol=0)
    else:
        with pytest.raises(err, match="rcond"):
            msign(G, rcond=rcond)
